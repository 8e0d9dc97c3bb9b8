// Package kafka is herald's Kafka transport: a Publisher the relay hands
// outbox events to, and a Consumer the worker receives them from.
//
// # Topics and records
//
// Three topics for the notifications themselves, named by the public
// contract and created by every process at start when missing (start order
// does not matter):
// notifications.requested carries the relay's events, notifications.retry
// holds retry copies until due, notifications.dlq keeps dead letters. A
// record is keyed by the notification's user id, so one user's
// notifications share a partition; its value is the event payload and its
// headers carry what RabbitMQ's properties do: message_id (the outbox id),
// content_type, type, x-retry-count, x-occurred-at, and x-last-error on
// retries and dead letters.
//
// # Status events
//
// The status events notification.sent and notification.failed (written by
// the transaction that settles a notification) go to a fourth topic,
// notifications.status (prefixed like the others), keyed by the user id
// their payload carries, with the same headers (message_id = the outbox
// id, content_type, type, x-occurred-at) and the same producer guarantees.
// Any other event type is refused (left unacknowledged, the error names
// it). No herald worker reads the topic: the group herald-worker
// subscribes to the requested and retry topics only. Other services read
// it with consumer groups of their own, as many as like. It keeps what
// the cluster's retention says (log.retention.hours, 7 days by default),
// read or not. The relay's Publisher and EnsureTopics create it when
// missing, the worker's Consumer does not: a Consumer recreates a missing
// topic and restarts its group session, which a topic it does not read
// must not cause.
//
// # Nothing settled on trust
//
// Every produce (the relay's batch, a retry copy, a dead letter) waits for
// acks from all in-sync replicas, with the idempotent producer, so a retry
// inside the client neither duplicates nor reorders a record. Workers form
// the consumer group herald-worker and commit an offset only when every
// record before it is settled: acknowledged after its effect was recorded,
// or moved (its retry copy or dead letter acknowledged first). Deliveries
// settle out of order across keys, so the commit is the end of the settled
// prefix of each partition; a crash redelivers the rest, and the store's
// deduplication absorbs what was applied already.
//
// # Order
//
// Deliveries of one key reach the handler one at a time, in offset order
// (which is create order, as the relay publishes in outbox order); other
// keys run side by side up to Prefetch, whatever partition they are on. A
// retry does not hold the key: the failed notification leaves for the
// retry topic and the user's next one goes out, so a retried notification
// may be sent after later ones of the same user. Holding the key for the
// retry delay (30s to hours) would stall every later notification of that
// user behind one bad address; herald prefers the reorder.
//
// A parked record (Release with a wait: its channel or destination down,
// its rate turn not come, the store unreachable) gives up its key the same
// way: a copy with the same retry count and the wait in x-retry-delay-ms
// goes to the retry topic, the original is settled, and the Consumer that
// reads the copy holds it for the wait and forwards it to the requested
// topic, behind what its key received meanwhile. So a user's notification
// parked for a channel that is down may be sent after that user's later
// ones; holding the key would stall them all (of every channel) for the
// length of the outage. Release with no wait hands the record out again at
// once, still first of its key, as does a Release whose copy the cluster
// did not acknowledge. Parked copies and retry copies share the retry
// topic's MaxBuffered.
//
// # Retries
//
// A retry copy carries its delay (x-retry-delay-ms), not a time. The
// Consumer also reads the retry topic and holds each record in memory for
// that delay, counted by its own monotonic clock from the moment it read
// the record, then republishes it to the requested topic and only then
// commits it. A copy is written by one worker and read by another, often on
// another machine: a due time would compare two clocks, and a clock ahead
// or behind by an hour would hold retries an hour too long or release them
// an hour early. Kafka has no delayed delivery and its record timestamps
// are a writer's or a broker's clock, so the delay counts from the read:
// a copy that waited in the topic first (consumer lag, a restart or a
// rebalance that makes another member read it again) waits longer than its
// delay, never less. Each restart of the workers can thus add up to one
// delay to the retries it catches held; herald accepts that for a retry
// that is never early.
//
// Copies written before x-retry-delay-ms carry x-due-at (Unix
// milliseconds of the writer's clock). They are still read, so an upgrade
// in the middle of a run loses nothing, but the time is not trusted: such a
// copy is held the schedule's delay for its retry count, from when it was
// read.
//
// Holding (rather than pausing a partition until its head is due) keeps a
// short delay from waiting behind a long one when the schedule has several
// delays. A Consumer holds at most MaxBuffered records of each topic; past
// that it pauses fetching the topic.
//
// # Membership
//
// A Consumer heartbeats to the group every second and is dropped from it
// after 10s without one (the session timeout; franz-go's default is 45s).
// A worker that dies without leaving the group (SIGKILL, a lost machine)
// thus keeps its partitions, and their records wait, for at most about
// 10s before the other members take them over. Brokers refuse a session
// timeout below group.min.session.timeout.ms (6s by default): a cluster
// configured above 10s rejects the Consumer's join, and needs that setting
// lowered. A member that stalls for longer than the session (a paused
// process) loses its partitions; its handlers' settles then go to the
// store's deduplication and stale-copy guard like any revoked delivery's.
//
// # Stopping
//
// When Consume's context ends (SIGTERM), the Consumer stops fetching and
// handing out records, gives the handlers in flight ShutdownGrace (5s by
// default) before cancelling their context, commits what was settled with
// a deadline of 2s, and leaves the group with a deadline of 2s. Whatever it
// could not settle or commit in that time stays uncommitted and is
// delivered again to the partition's next owner; the store absorbs what
// was applied already. So a worker stops within 10s whatever state the
// group is in (a rebalance in progress makes a commit or a leave wait for
// the slowest member).
//
// # Dead letters
//
// A Kafka topic cannot delete single records, so herald dlq redrive does
// not remove anything from notifications.dlq: the database is the record
// of dead letters (status failed), a redrive gives the notification a fresh
// event, and the topic stays an append-only log of what died and why,
// pruned by its retention.
package kafka
