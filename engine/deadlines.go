package engine

// Every state in which the engine waits for a client has a deadline and a
// size bound, so no client can hold a connection slot forever. The names
// in the first column appear beside the code that sets each deadline.
//
//	state           waiting for                          deadline (from)                         bound           enforced by
//	--------------  -----------------------------------  --------------------------------------  --------------  ------------------------
//	stateHandshake  the TLS handshake                    header_timeout (accept), shared with    16 KiB records  reactor read deadline
//	                                                     stateFirst
//	stateFirst      the first request: its head (h1),    header_timeout (accept)                 max_header_bytes reactor read deadline
//	                or the preface, SETTINGS and first
//	                HEADERS (h2, h2c)
//	stateHead       the rest of a later request head     header_timeout (its first byte)         max_header_bytes reactor read deadline
//	stateBody       an announced request body, being     body_timeout (the response written),    1 MiB, then the reactor read deadline
//	                discarded, chunked trailer included  for the whole body                      connection closes
//	stateIdle       the next request on a keep-alive     idle_timeout (the last response)        -               reactor read deadline
//	                connection (h1)
//	(TLS record)    the rest of a TLS record             whichever of the above the driver is     16 KiB + 256    (same)
//	                                                     in: a record is not a state of its own
//	(close_notify)  nothing: later records are ignored   the driver's own close                  -               -
//	h2 idle         a new stream (none open)             idle_timeout, then GOAWAY, then 5 s     -               h2 tick, read deadline
//	h2 header block CONTINUATION frames                  header_timeout (the HEADERS frame)      4×max_header_   h2 tick (ExpireHeaders):
//	                                                                                             bytes, 32 frames GOAWAY ENHANCE_YOUR_CALM
//	h2 request body DATA after the response ended        body_timeout (response end):            stream window   h2 Expire
//	                                                     RST_STREAM NO_ERROR
//	h2 window       WINDOW_UPDATE for a stream, enough   send_timeout (window ran out) unless    -               h2 Expire
//	                to send 16 KiB (a byte at a time     16 KiB could be sent since:
//	                is a stall)                          RST_STREAM CANCEL
//	h2 progress     any response on the connection to    send_timeout (responses waiting)        -               h2 Expire
//	                send 16 KiB or finish (shut or       unless one did: GOAWAY
//	                trickled windows, streams rotated)   ENHANCE_YOUR_CALM
//	(sending)       the client to read (any protocol)    send_timeout (last byte taken)          socket buffer   reactor sweep
//	(lingering)     the client to read our answer        2 s after an error response             256 KiB read    reactor linger
//	h3 handshake    the QUIC handshake                   min(10 s, header_timeout/2) idle,       -               quic-go
//	                                                     twice that in all
//	h3 streams      a request stream's HEADERS (quic-go  idle_timeout after the connection's     max_streams     h3 connWatch: close
//	                reads them; it has no hook before)   last request (not per stream)           per connection  H3_NO_ERROR
//	                with [webtransport] on (raw serving): header_timeout per stream, first      h3 serveBidi read
//	                                                     varint to HEADERS: reset                                deadline
//	                                                     H3_REQUEST_INCOMPLETE
//	wt stream head  a WebTransport stream's signal and   header_timeout: reset                   -               wt readHeader
//	                session ID                           H3_GENERAL_PROTOCOL_ERROR
//	wt orphan       a stream's session to appear         1 s: WT_BUFFERED_STREAM_REJECTED        16 per conn.    wt find
//	wt session      a byte either way (streams,          webtransport.idle_timeout: CLOSE        max_bytes_per_  wt checkIdle
//	                datagrams, capsules)                 0x100                                   session, max_
//	                                                                                             streams_per_
//	                                                                                             session
//	wt capsule      the client to read a capsule         1 s write deadline                      -               wt writeCapsule
//	h3 stop (raw)   responses and sessions in flight     shutdown_grace; then sessions CLOSE     -               h3 shutdownRaw
//	                                                     0x105 and connections close
//	h3 idle         a new request                        idle_timeout                            -               quic-go, h3 connWatch
//	h3 response     the client's flow-control credit     send_timeout: H3_REQUEST_CANCELLED      one 128 KiB     h3 Body
//	                                                                                             chunk
//	h3 request body nothing: never read; quic-go stops   -                                       stream window   quic-go
//	                the stream after the response
//	pass hello      a passthrough ClientHello (TCP),     header_timeout (accept), shared with    16 KiB          reactor read deadline
//	                in any segments and records          stateHandshake
//	pass connect    the route's upstream to accept       connect_timeout (each upstream tried)   -               reactor Dial
//	pass relay      a byte either way                    the route's idle_timeout (10 m)         two pipes        connHandler expireRelays
//	(relay send)    either peer to read                  send_timeout, not while waiting on the  pipe (1 MiB)    reactor sweep
//	                                                     other side
//	quic hello      the rest of a QUIC ClientHello       min(header_timeout, 10 s) (its first    8 datagrams,    quicRouter sweep
//	                                                     Initial)                                16 KiB; 4,096
//	quic relay      a datagram either way                min(idle_timeout, 3 m)                  max_connections quicRouter sweep
//	                                                                                             flows
//	quic one-sided  the upstream to answer a client      15 s (1 s for a new flow at             -               quicRouter sweep,
//	                that keeps sending                   max_connections)                                        makeRoom
//	quic handshake  the upstream to send 1-RTT only      15 s (10 s for a new flow at            -               quicRouter sweep,
//	                (its handshake done)                 max_connections)                                        makeRoom
//	redirect        [redirect_http]: every state of a    as stateFirst, stateHead, stateBody,    max_header_bytes reactor read deadline
//	                plain HTTP/1.1 connection            stateIdle (its own reactor loop)
//	acme-tls/1      a TLS-ALPN-01 validation handshake   as stateHandshake; closed when done     16 KiB records  reactor read deadline
//	http-01 lookup  a challenge another engine of the    5 s (storage read on a worker)          4 KiB answer    context timeout
//	                fleet started (shared storage)
//	(the CA)        not a client: certmagic's requests   30 s per HTTP request; failed orders    -               certmagic
//	                to the ACME server                   retried with back-off (1 m, 2 m, ...)
//	admin head      a request on [admin] (net/http)      5 s head, 10 s request                  16 KiB head,    http.Server, LimitListener
//	                                                                                             32 connections
//	admin idle      the next request on [admin]          60 s                                    -               http.Server
//	admin response  the scraper to read (a CPU profile   2 m                                     -               http.Server
//	                runs its ?seconds= first)
//	access log      nothing: the disk, never waited on   -                                       access_log_buffer writer goroutine; lines
//	                by a reactor                                                                                 past it dropped, counted
//
// The reactor's read deadline fires only while nothing is queued for the
// client; while output is queued, send_timeout applies instead. And at
// max_connections a worker admits a new connection by closing the one
// that waits for its client nearest its deadline (any row above with a
// read deadline), never one with a response in progress.
