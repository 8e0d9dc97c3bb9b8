// Package notify holds the types every part of herald speaks: the
// notification, the outbox event and its payload, the message a worker
// receives, the outcome of a delivery, validation of a create request and the
// sentinel errors callers branch on.
//
// It imports nothing else from the project. Data flows one way through the
// packages that use it: api -> store -> relay -> transport -> worker -> sender.
package notify
