// Package consume holds what every broker transport shares: the settings
// they are configured with (Settings, with one set of defaults), and the
// plumbing of their consumers: the guard that settles a delivery once
// (Once), the part of a delivery every broker's has alike (Delivered), the
// reconnect backoff (Backoff), the pause and the periodic check that end
// with the consumer's context (Sleep, Every; herald's bench, its status
// drain and the chaos harness pause with Sleep too), the handlers' context that
// outlives a stop by a grace (HandlerContext), the deliveries a handler
// left unsettled, handed back when a session stops (Held), the bound on
// the reason a copy carries (Truncate, MaxReason), the sample of ids an
// error names (SampleIDs), and the notification a dead letter names
// (DeadLetterNotification, NamesOneOf). It knows no broker: each transport
// package embeds Settings in its Config and Delivered in its delivery,
// wraps the rest in its own session types, and does the hand-back itself
// (a confirmed copy, a negative acknowledgement, a visibility of 0). It
// imports only the standard library and notify.
package consume
