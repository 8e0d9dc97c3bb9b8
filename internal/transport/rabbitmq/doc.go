// Package rabbitmq is herald's RabbitMQ transport: a Publisher the relay
// hands outbox events to, and a Consumer the worker receives them from.
//
// The topology is fixed by the public contract (see Topology): a topic
// exchange "notifications" routes notification.requested to the queue
// "notifications.send"; retries wait in "notifications.retry" for the retry
// delay (its message TTL) and dead-letter back to the exchange; dead letters
// go through the exchange "notifications.dlx" to "notifications.send.dlq".
// Every Publisher and Consumer declares it on each (re)connect, so start
// order does not matter.
//
// Nothing is settled on trust: every publish (the relay's, a retry copy, a
// dead letter) is mandatory and waits for the broker's confirm, and a
// message the broker returned as unroutable counts as not published. A
// delivery is acknowledged only after its retry copy or dead letter is
// confirmed, so an outage at any point leaves the message either in place or
// safely moved, never lost.
package rabbitmq
