package h2

import "golang.org/x/net/http2"

// ctrlCost takes a token for a frame that costs work and gives nothing
// (SETTINGS, PING, PRIORITY, empty DATA, unknown types). It reports false
// when the flood limit ended the connection.
func (c *Conn) ctrlCost() bool {
	c.refill()
	c.ctrlTokens--
	if c.ctrlTokens < 0 {
		c.event(EventControlFlood, nil)
		c.fail(http2.ErrCodeEnhanceYourCalm, "too many control frames")
		return false
	}
	return true
}

// Limits of WINDOW_UPDATE frames: a client may send windowUpdateBase
// of them, and windowUpdatesPerData more for each DATA frame it was sent
// (a receiver credits its stream and its connection at most once each per
// frame it read; Envoy's default ratio is the same 10).
const (
	windowUpdateBase     = 1000
	windowUpdatesPerData = 10
)

// windowUpdateCost counts a WINDOW_UPDATE frame: credit that no DATA
// frame used up costs the server work for nothing (70,000 a second took
// three quarters of a core), and past the ratio above the connection
// ends. It reports false when the limit ended the connection.
func (c *Conn) windowUpdateCost() bool {
	c.windowUpdates++
	if c.windowUpdates > windowUpdateBase+windowUpdatesPerData*c.dataSent {
		c.event(EventControlFlood, nil)
		c.fail(http2.ErrCodeEnhanceYourCalm, "too many WINDOW_UPDATE frames for the DATA frames sent")
		return false
	}
	return true
}

func (c *Conn) refill() {
	if c.lastRefill == 0 {
		c.lastRefill = c.now
		return
	}
	d := float64(c.now-c.lastRefill) / 1e9
	if d <= 0 {
		return
	}
	c.lastRefill = c.now
	c.ctrlTokens = min(ctrlBurst, c.ctrlTokens+d*ctrlPerSec)
	c.resetTokens = min(resetBurst, c.resetTokens+d*resetPerSec)
}

// checkQueue ends a connection whose unread control output piles up.
func (c *Conn) checkQueue() error {
	if len(c.ctrl) > c.cfg.MaxQueuedControl {
		c.event(EventQueueFlood, nil)
		return c.fail(http2.ErrCodeEnhanceYourCalm, "control frames not read")
	}
	return nil
}

func (c *Conn) event(e Event, err error) {
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(e, err)
	}
}

// resetCost takes a token for a stream reset before its answer, or
// refused; it reports false when the limit ended the connection.
func (c *Conn) resetCost() bool {
	c.refill()
	c.resetTokens--
	if c.resetTokens < 0 {
		c.event(EventRapidReset, nil)
		c.fail(http2.ErrCodeEnhanceYourCalm, "too many streams reset or refused")
		return false
	}
	return true
}
