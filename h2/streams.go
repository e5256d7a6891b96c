package h2

import "golang.org/x/net/http2"

// resetStream sends RST_STREAM and ends the stream if it is open. A reset
// for the client's error (anything but NO_ERROR and CANCEL, which are the
// server's own choices) costs from the same budget as a reset the client
// sends: provoking resets with malformed frames is the rapid-reset attack
// by other means (CVE-2025-8671, "MadeYouReset"). When the budget is
// spent the connection ends instead (deadErr reports it).
func (c *Conn) resetStream(id uint32, code ErrCode) {
	if code != http2.ErrCodeNo && code != http2.ErrCodeCancel && !c.resetCost() {
		return
	}
	c.fr.WriteRSTStream(id, code)
	c.reset[c.resetN%len(c.reset)] = id
	c.resetN++
	if st := c.streams[id]; st != nil {
		c.closeStream(st, code, false)
	}
	c.checkQueue()
}

// abortStream resets st because its response cannot be completed (the
// server's fault, not a provoked reset: it does not count against the
// peer's reset budget). RFC 9113 §8.1: a response cut short is reset, so
// the client never takes it for a whole one.
func (c *Conn) abortStream(st *Stream) {
	c.fr.WriteRSTStream(st.ID, http2.ErrCodeInternal)
	c.reset[c.resetN%len(c.reset)] = st.ID
	c.resetN++
	c.closeStream(st, http2.ErrCodeInternal, false)
	c.checkQueue()
}

func (c *Conn) forgetReset(id uint32) {
	for i, r := range c.reset {
		if r == id {
			c.reset[i] = 0
		}
	}
}

// wasReset reports whether we reset stream id recently.
func (c *Conn) wasReset(id uint32) bool {
	for _, r := range c.reset {
		if r == id {
			return true
		}
	}
	return false
}

// closeStream removes st. code and byPeer describe a reset; a stream whose
// response was produced to the end closes with code 0.
func (c *Conn) closeStream(st *Stream, code ErrCode, byPeer bool) {
	delete(c.streams, st.ID)
	if st.done {
		return
	}
	if i := c.sendingIndex(st); i >= 0 {
		c.sending = append(c.sending[:i], c.sending[i+1:]...)
	}
	if !st.localDone || code != 0 {
		st.Reset, st.ResetCode = true, code
		if st.busy {
			c.zombies++
		}
	}
	c.notifyDone(st)
}

// notifyDone tells the handler once that st needs nothing more from it.
func (c *Conn) notifyDone(st *Stream) {
	if !st.done {
		st.done = true
		c.h.StreamDone(st)
	}
}

func (c *Conn) sendingIndex(st *Stream) int {
	for i, s := range c.sending {
		if s == st {
			return i
		}
	}
	return -1
}

// MarkBusy says the handler has started work for st that outlives a reset
// (opening a file on a worker); until WorkDone, a reset stream still
// counts against the concurrency limit.
func (c *Conn) MarkBusy(st *Stream) { st.busy = true }

// WorkDone ends what MarkBusy started.
func (c *Conn) WorkDone(st *Stream) {
	if !st.busy {
		return
	}
	st.busy = false
	if st.done && st.Reset {
		c.zombies--
	}
}
