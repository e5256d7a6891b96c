// Package routing decides which configured thing a host name belongs to:
// the one rule for matching a name against the names a configuration
// gives (an exact name, then the longest "*." wildcard, then "*"), which
// sites, certificates and proxy and passthrough routes all look names up
// through, so they cannot disagree; and the route tables themselves
// (Routes: each domain's routes by longest path prefix, their upstreams,
// and the upstreams' health and load-balancing choice).
//
// It imports nothing of the engine's but its configuration.
package routing
