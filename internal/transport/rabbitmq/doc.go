// Package rabbitmq is herald's RabbitMQ transport: a Publisher the relay
// hands outbox events to, and a Consumer the worker receives them from.
//
// The topology is fixed by the public contract (see Topology): a topic
// exchange "notifications" routes notification.requested to the queue
// "notifications.send"; retries wait in "notifications.retry" for the retry
// delay (its message TTL) and dead-letter back to the exchange; dead letters
// go through the exchange "notifications.dlx" to "notifications.send.dlq".
// A retry schedule of several delays adds one retry queue per further
// distinct delay ("notifications.retry.5m"), so that no retry waits behind
// a longer one. Every Consumer declares all of it on each (re)connect, and
// every Publisher what it publishes to (Topology.DeclareRoute: the
// exchanges, the send queue and the dead letters), so start order does not
// matter. The consumers (the workers) own the retry schedule: only they
// declare the retry queues, whose TTLs it sets, so a publisher (the relay)
// runs with any Config.RetryDelays and all consumers must agree on theirs.
//
// The queues are quorum queues by default (Config.QueueType): replicated
// across the nodes of a cluster, and dead-lettering at least once, so an
// expired retry is not dropped on its way back to the send queue. Classic
// queues keep the topology herald had before.
//
// The status events (notification.sent, notification.failed) go to the same
// exchange with their type as routing key, for queues other services bind
// themselves (say to "notification.*"); herald binds none. They are the one
// publish that is not mandatory: with no queue bound, the broker drops them
// and confirms, by design, so that nobody listening never holds up the
// outbox.
//
// Nothing is settled on trust: every other publish (the relay's, a retry
// copy, a dead letter) is mandatory and waits for the broker's confirm, and
// a message the broker returned as unroutable counts as not published. A
// delivery is acknowledged only after its retry copy or dead letter is
// confirmed, so an outage at any point leaves the message either in place or
// safely moved, never lost. A Consumer publishes those copies on a
// connection of its own, so that a broker blocking a publisher never holds
// back the acknowledgements.
//
// A delivery that cannot go now is parked: Release(ctx, after) publishes an
// unchanged copy to the park queue of the shortest delay that is at least
// after ("notifications.park.1s", ".2s", ".5s", ".10s", ".30s", ".1m"),
// waits for its confirm and acks the original, so that the parked message
// holds no prefetch place. The park queue's TTL dead-letters it through the
// default exchange to the send queue alone (no other binding of the
// notifications exchange gets a copy of each park). One queue per delay,
// because a TTL per message would expire only at the head of one queue:
// a short park would wait behind a long one.
//
// No hand-back counts towards a broker's delivery limit (RabbitMQ 4 gives
// quorum queues one of 20 by default, and counts every requeue): Release,
// and a Consumer that stops with deliveries unsettled, publish an unchanged
// copy (to a park queue, or to the send queue) and ack the original once
// the copy is confirmed, rather than requeueing it; a delivery the broker
// itself has returned twice (lost connections) is replaced by such a copy
// on arrival.
//
// Config.URL may list several nodes of a cluster, comma-separated: every
// connection goes to the first node that answers, and after a connection is
// lost the next attempt starts with the following node.
package rabbitmq
