// Package deployment lets the API's process show the whole deployment,
// not only itself: every long-running herald process reports itself to the
// store every few seconds (Reporter: its roles, and a worker the state of
// its senders), and Reader gathers those reports with the notifications
// still pending, the outbox and the broker's queue depths into one
// notify.Deployment, which the console's overview and GET /status show.
//
// The reports go through the database, not the broker: every shape has
// one (the outbox table included), and the API already reads it. A report
// is one small write every Config.Every, off the delivery path; a process
// that stops cleanly deletes its row, one that stops reporting is shown
// stale after LiveWithin and forgotten after Forget.
package deployment
