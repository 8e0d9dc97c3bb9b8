// Package consume holds the plumbing every broker's consumer shares: the
// guard that settles a delivery once (Once), the reconnect backoff
// (Backoff) and the set of deliveries a handler left unsettled, handed back
// when a session stops (Held). It knows no broker: each transport package
// wraps these in its own delivery and session types.
package consume
