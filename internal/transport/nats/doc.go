// Package nats is herald's NATS JetStream transport: a Publisher the relay
// hands outbox events to, and a Consumer the worker receives them from.
//
// The names are fixed by the public contract (see Topology): one stream,
// NOTIFICATIONS, holds three subjects. The relay publishes to
// notifications.requested, with the outbox id as Nats-Msg-Id, so that the
// stream's duplicate window absorbs a relay's re-publish of a batch it
// could not mark. Workers share the durable pull consumer herald-worker on
// that subject (explicit acks, AckWait longer than a send). A retried
// message is copied to notifications.retry with x-retry-count one higher and
// the time it is due in x-due-at; the durable consumer herald-retry, which
// every worker also runs, holds each copy back (a negative acknowledgement
// with the delay left) until it is due and then moves it back to
// notifications.requested. Dead letters are copied to notifications.dlq with
// the reason in x-last-error; nothing consumes that subject, so they stay
// until herald dlq redrive removes them.
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
// (create or update), so start order does not matter, and a stream deleted
// while they run is declared again: the Publisher on its next call after a
// publish found no stream, the Consumer after it noticed its consumer gone
// (an error from the server, or the periodic check every CheckInterval).
package nats
