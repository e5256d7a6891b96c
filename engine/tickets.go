package engine

import (
	"bytes"
	"crypto/tls"
)

// ticketNameTag marks, in a session ticket's SessionState.Extra, the
// server name (SNI, normalized) the ticket was issued under.
var ticketNameTag = []byte("engine-sni\x00")

// bindTickets makes the session tickets of c resume only under the name
// they were issued for. crypto/tls resumes a TLS 1.3 ticket whatever
// name the client now sends, so a ticket from a connection authenticated
// with b.test's certificate would carry a connection for a.test, which
// has a certificate, a minimum version and a ticket policy of its own,
// without a.test's certificate ever being shown (RFC 6066 §3: a server
// must not resume a session under another server name). A ticket issued
// for another name, or not by this function, is declined: the client
// gets a full handshake.
//
// The functions capture c: call it on the configuration whose ticket
// keys encrypt the tickets (clones made later share them).
func bindTickets(c *tls.Config) {
	c.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		ss.Extra = append(ss.Extra, append(bytes.Clone(ticketNameTag), serverName(cs.ServerName)...))
		return c.EncryptTicket(cs, ss)
	}
	c.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		ss, err := c.DecryptTicket(identity, cs)
		if err != nil || ss == nil {
			return nil, err
		}
		for _, e := range ss.Extra {
			if name, ok := bytes.CutPrefix(e, ticketNameTag); ok && string(name) == serverName(cs.ServerName) {
				return ss, nil
			}
		}
		return nil, nil
	}
}
