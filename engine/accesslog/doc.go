// Package accesslog follows each request from its parsed head to the end
// of its response (Record), and each relayed connection (Relay), and
// writes their access log lines, nginx's combined format (stream's basic
// one for relays) or JSON, through a bounded buffer that never blocks a
// loop on the disk (Log): past access_log_buffer, lines are dropped and
// counted.
//
// It imports nothing of the engine's.
package accesslog
