// Package proxy is the reverse proxy's exchange and its upstream
// client: a request that matched a route, in any protocol, becomes an
// Exchange, a fresh HTTP/1.1 request (engine/reframe) written to a pooled
// upstream connection on a reactor loop (the client's own, for HTTP/1.1
// and HTTP/2; one chosen in turn for HTTP/3), its body streamed up as it
// arrives, and the response streamed back as the client takes it.
//
// Each side moves only when the other has room (the client's queued
// output written, the upstream's queued output written), so memory per
// exchange is one input buffer on each side and one copy in flight.
//
// The client side is the engine's protocol driver, behind Client; this
// package knows no protocol but the upstream's HTTP/1.1, and does not
// import the engine. Table is the routes and counters every loop shares;
// Loop, one per reactor loop, holds that loop's upstream connections and
// the requests waiting for one (max_conns), and is touched only on its
// loop.
package proxy
