// Package consume holds the plumbing every broker's consumer shares: the
// guard that settles a delivery once (Once), the reconnect backoff
// (Backoff), the handlers' context that outlives a stop by a grace
// (HandlerContext) and the deliveries a handler left unsettled, handed back
// when a session stops (Held), and the bound on the reason a copy carries
// (Truncate, MaxReason). It knows no broker: each transport package
// wraps these in its own delivery and session types, and does the hand-back
// itself (a confirmed copy, a negative acknowledgement, a visibility of 0).
// It imports only the standard library.
package consume
