package notify

import "time"

// PendingCap bounds the count of pending notifications a status read
// makes: past it the count is reported as PendingCap and Capped, so that a
// console refreshing every few seconds during a long outage reads a bounded
// range of an index, not the whole backlog.
const PendingCap = 100_000

// PendingStats describes the notifications not settled yet: what waits for
// a delivery, whatever the outbox, the broker or the workers say.
type PendingStats struct {
	// Pending is the number of notifications in status pending (at most
	// PendingCap).
	Pending int64
	// Capped is true when there are more than PendingCap.
	Capped bool
	// OldestAge is the age of the oldest pending notification (since its
	// created_at, by the store's clock); 0 when none is pending.
	OldestAge time.Duration
}

// QueueDepth is one queue of a broker as the broker reports it. A field the
// broker cannot tell is nil.
type QueueDepth struct {
	// Name is the queue (RabbitMQ), consumer (NATS) or queue URL's name
	// (SQS), as the broker names it.
	Name string
	// Role says what the queue holds: "send", "retry", "park" or "dead".
	Role string
	// Ready is the number of messages waiting to be delivered.
	Ready int64
	// InFlight is the number of messages delivered and not yet settled
	// (unacknowledged, not visible).
	InFlight *int64
	// Delayed is the number of messages not deliverable yet (SQS delay).
	Delayed *int64
	// Consumers is the number of consumers attached.
	Consumers *int
}

// The roles of a queue (QueueDepth.Role).
const (
	QueueSend  = "send"
	QueueRetry = "retry"
	QueuePark  = "park"
	QueueDead  = "dead"
)

// Process is one herald process as it reports itself to the store every
// few seconds (a heartbeat): the api, a relay, a worker, or serve (all
// three). A worker reports the state of its senders, so that the API's
// process can show the state of every worker of the deployment.
type Process struct {
	// ID is random, made when the process starts.
	ID string
	// Host and PID say where it runs.
	Host string
	PID  int
	// Roles are its parts: "api", "relay", "worker".
	Roles []string
	// Version is herald's version.
	Version string
	// StartedAt is when it started; SeenAt when it last reported (the
	// store's clock where the store has one).
	StartedAt time.Time
	SeenAt    time.Time
	// Age is how long ago it last reported, by the store's clock where it
	// has one; set by a read.
	Age time.Duration
	// Live is true when it reported recently enough to be running; a
	// process that stopped reporting (crashed, cut off) is stale until the
	// writers forget it. Set by the reader.
	Live bool
	// Senders are a worker's senders, one per channel.
	Senders []SenderReport
}

// SenderReport is a worker's sender of one channel, as the worker reports
// it.
type SenderReport struct {
	// Channel is the sender's channel.
	Channel string `json:"channel"`
	// Up is true while the provider takes sends.
	Up bool `json:"up"`
	// Class is why sends are paused when not Up: "down" or "throttled".
	Class string `json:"class,omitempty"`
	// Reason is the provider's last failure when not Up.
	Reason string `json:"reason,omitempty"`
	// Since is when the sender's state last changed, as far as the process
	// knows (its start, for a sender up since then).
	Since time.Time `json:"since"`
	// Until is the earliest next probe or trial send when not Up.
	Until *time.Time `json:"until,omitempty"`
	// PausedDestinations counts the channel's destinations paused on their
	// own.
	PausedDestinations int `json:"paused_destinations"`
}

// Deployment is what the API's process knows of the whole deployment: the
// notifications waiting, the outbox, the broker's queues and the processes
// that report themselves.
type Deployment struct {
	// At is when it was read.
	At time.Time
	// Pending are the notifications not settled yet.
	Pending PendingStats
	// Outbox is the outbox's backlog (events not yet handed to the
	// broker) and the dead letters.
	Outbox OutboxStats
	// Transport names the transport ("table", "rabbitmq", ...).
	Transport string
	// QueuesKnown is true when the transport reports its queues' depths;
	// Queues are then its queues, unless QueueError says why the broker did
	// not answer.
	QueuesKnown bool
	Queues      []QueueDepth
	QueueError  string
	// Processes are the processes that report themselves, live and stale.
	Processes []Process
}

// Workers returns the live processes that run a worker.
func (d Deployment) Workers() []Process {
	var out []Process
	for _, p := range d.Processes {
		if p.Live && p.HasRole("worker") {
			out = append(out, p)
		}
	}
	return out
}

// HasRole reports whether the process runs role.
func (p Process) HasRole(role string) bool {
	for _, r := range p.Roles {
		if r == role {
			return true
		}
	}
	return false
}
