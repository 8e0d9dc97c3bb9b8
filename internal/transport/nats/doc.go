// Package nats is herald's NATS JetStream transport: a Publisher the relay
// hands outbox events to, and a Consumer the worker receives them from.
//
// The names are fixed by the public contract (see Topology): the stream
// NOTIFICATIONS holds three subjects, and NOTIFICATIONS_STATUS the status
// events (see "Status events"). The relay publishes to
// notifications.requested, with the outbox id as Nats-Msg-Id, so that the
// stream's duplicate window absorbs a relay's re-publish of a batch it
// could not mark. Workers share the durable pull consumer herald-worker on
// that subject (explicit acks, AckWait longer than a send). Each worker
// has at most Prefetch deliveries in flight: it pulls only as many as it
// has idle handlers. The consumer's MaxAckPending is a ceiling shared by all
// workers (10,000 by default), not the per-worker bound, so N workers hold
// up to N x Prefetch between them. A retried message is copied to
// notifications.retry with x-retry-count one higher and its delay in
// x-retry-delay-ms; the durable consumer herald-retry, which every worker
// also runs, holds each copy back and then moves it back to
// notifications.requested. Dead letters are copied to notifications.dlq with
// the reason in x-last-error; nothing consumes that subject, so they stay
// until herald dlq redrive removes them.
//
// # Parking
//
// A delivery that cannot go now (its channel or destination down, its
// rate turn not come, the store unreachable) is parked: Release(ctx,
// after) copies it, unchanged (x-retry-count kept), to notifications.retry
// with after in x-retry-delay-ms, and the retry scheduler moves it back to
// notifications.requested once after has passed, as it does a retry. Each
// park's copy has a Nats-Msg-Id of its own (the outbox id, "park" and the
// stream sequence of the delivery parked), and so has each move (the
// copy's, with ".moved"), so the duplicate window never drops the second
// park of a message. Release with no wait copies the message to the back
// of notifications.requested. No hand-back is a negative acknowledgement
// of the worker consumer: a plain Nak puts the message at the head of the
// line, ahead of everything that could go, and a Nak with a delay keeps it
// pending on the consumer until due, so that parked messages would fill
// its MaxAckPending (shared by every worker) and stop all deliveries. A
// parked copy waits as a pending delivery of the retry consumer instead,
// whose ceiling is a million. Only a consumer that stops hands back what it
// holds with a plain Nak (the next consumer should get it first), and a
// Release whose copy cannot be stored falls back to a Nak with the delay.
//
// # Status events
//
// The status events notification.sent and notification.failed (written by
// the transaction that settles a notification) go to the subjects
// notifications.status.sent and notifications.status.failed, prefixed like
// the others, in a stream of their own, NOTIFICATIONS_STATUS, with the same
// headers (x-message-id and Nats-Msg-Id = the outbox id, x-type,
// x-occurred-at) and the same duplicate window. No herald process consumes
// them: the worker's consumer filters notifications.requested, in the other
// stream. Another service reads them with a consumer of its own on
// notifications.status.> (or one of the two subjects), and any number of
// services can, each reading every event.
//
// They are not in NOTIFICATIONS, where the public contract first placed
// them, because of its work-queue retention: there a message no consumer's
// filter matches stays until the stream's limits, and NOTIFICATIONS has
// none (a limit would expire waiting notifications and dead letters), so
// with nobody reading status events they would pile up for ever; and the
// consumers of a work-queue stream must not overlap, and the first one to
// acknowledge a message deletes it, so only one service could ever read
// them. NOTIFICATIONS_STATUS has limits retention: an event stays, read or
// not, until it is Config.StatusMaxAge old (7 days by default), and is
// dropped then. A consumer that falls further behind than that loses
// events; the database keeps every outcome.
//
// The stream is declared beside NOTIFICATIONS, which stays as older
// versions declared it: an installation upgrades without touching it. A
// stream named NOTIFICATIONS_STATUS that herald cannot update to its
// settings (work-queue retention, say), or another stream that holds the
// status subjects already, is refused with ErrTopologyMismatch, a
// notify.Permanent error that stops the relay with the server's reason.
// An event of any other type is refused (left unconfirmed, the error names
// the type).
//
// # Retry delays without clocks
//
// A copy is written by one worker and moved by another, often on another
// machine, so it carries a duration, never a time: comparing a due time
// written by one clock with another clock would hold retries for hours, or
// release them at once, when the clocks disagree. The server counts the
// delay: on its first delivery (NumDelivered 1 in the message's metadata)
// the retry consumer hands the copy back with NakWithDelay(delay); on a
// later delivery it is due and is moved. The worker that handed it back
// also remembers, by its own monotonic clock, until when it holds the copy,
// so that a copy it receives again early (the server restarted, or the
// negative acknowledgement was lost in a reconnect) is held for the rest.
// What this design gives up: when that worker is gone (it crashed between
// receiving a copy and handing it back, or stopped while holding it) and
// the server delivers the copy again before its delay, another worker
// moves it early, no earlier than the retry consumer's ack wait (30s)
// after it was received. A retry can then come early; it is never lost,
// never loops, and never waits on a clock's error.
//
// Copies written before x-retry-delay-ms carry x-due-at instead (Unix
// milliseconds of the writer's clock). They are still moved, so an upgrade
// in the middle of a run loses nothing, but the time is not read: on its
// first delivery such a copy is held the schedule's delay for its retry
// count; on a later one (an older worker had held it already) it is due.
//
// # Stopping
//
// When Consume's context ends (SIGTERM) it stops pulling (a pull in
// progress ends within a second), gives the handlers in flight
// ShutdownGrace (5s by default) before cancelling their context, hands
// every delivery left unsettled back to the server and flushes those
// hand-backs for at most 2s, so a worker stops within 10s; a hand-back
// that did not reach the server comes back after the ack wait.
//
// The stream keeps work-queue retention: a message is deleted once its
// consumer acknowledged it, so the stream holds what is still to do, the
// waiting retries and the dead letters, nothing else.
//
// Nothing is settled on trust: every publish waits for the stream's
// acknowledgement, and a delivery is acknowledged only after its retry copy
// or dead letter was stored. Every copy carries a Nats-Msg-Id derived from
// the outbox id and the retry count, so a copy published twice (a worker
// whose acknowledgement of the original was lost gets it again) is stored
// once.
//
// Every Publisher and Consumer declares what it uses when it connects
// (create or update; the Publisher both streams, the Consumer
// NOTIFICATIONS and its consumers), so start order does not matter, and a
// stream deleted while they run is declared again: the Publisher on its
// next call after a publish found no stream, the Consumer after it noticed
// its consumer gone (an error from the server, or the periodic check every
// CheckInterval).
package nats
