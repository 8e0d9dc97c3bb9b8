package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/notify"
)

// RoutingKey routes notification.requested events to the send queue. It is
// never prefixed.
const RoutingKey = notify.EventRequested

// Headers herald sets on its messages.
const (
	// HeaderRetryCount holds the number of retries before this delivery.
	HeaderRetryCount = "x-retry-count"
	// HeaderLastError holds the reason of the last failure, on retries and
	// dead letters.
	HeaderLastError = "x-last-error"
	// HeaderOccurredAt holds when the event was written, in Unix
	// microseconds.
	HeaderOccurredAt = "x-occurred-at"
)

// Queue types (Config.QueueType).
const (
	// QueueQuorum declares replicated quorum queues that dead-letter at
	// least once: an expired retry is removed from its retry queue only
	// once the send queue has confirmed it, so the broker never drops a
	// retry on the way back. Needs RabbitMQ 3.10 or later.
	QueueQuorum = "quorum"
	// QueueClassic declares classic queues, as herald did before quorum
	// queues: one node, and dead-lettering that is at most once.
	QueueClassic = "classic"
)

// ErrTopologyMismatch means an exchange or queue already exists with other
// settings than the ones declared (a retry queue declared with a different
// retry delay, a queue of the other queue type). Retrying cannot cure it; an
// operator has to delete the queue or restore the setting.
var ErrTopologyMismatch = errors.New("rabbitmq topology exists with other settings")

// Topology names the exchanges and queues of one herald installation and
// carries the settings the broker stores with them: the retry delays and
// the queue type.
//
// Each distinct delay of the retry schedule has a retry queue of its own, so
// that a message never waits behind one with a longer delay: the first
// delay's queue is RetryQueue ("notifications.retry"), each further distinct
// delay's is RetryQueue followed by a dot and the delay
// ("notifications.retry.5m", "notifications.retry.1h30m",
// "notifications.retry.500ms"). A schedule of one delay keeps the single
// retry queue.
type Topology struct {
	// Exchange receives the relay's events (topic, durable).
	Exchange string
	// SendQueue is what workers consume, bound to Exchange with RoutingKey.
	SendQueue string
	// RetryQueue holds retry copies for RetryDelay, then dead-letters them
	// back to Exchange. It is the retry queue of the first delay of the
	// schedule.
	RetryQueue string
	// DeadLetterExchange receives dead letters (topic, durable).
	DeadLetterExchange string
	// DeadLetterQueue keeps dead letters, bound to DeadLetterExchange with #.
	DeadLetterQueue string
	// RetryDelay is the RetryQueue's x-message-ttl.
	RetryDelay time.Duration
	// RetryDelays is the retry schedule: the i-th retry waits
	// RetryDelays[i-1], the last delay repeating. Empty means RetryDelay
	// alone.
	RetryDelays []time.Duration
	// QueueType is QueueQuorum or QueueClassic; empty means QueueQuorum.
	QueueType string
}

// NewTopology returns the contract's names with prefix prepended to each.
func NewTopology(prefix string, retryDelay time.Duration) Topology {
	return Topology{
		Exchange:           prefix + "notifications",
		SendQueue:          prefix + "notifications.send",
		RetryQueue:         prefix + "notifications.retry",
		DeadLetterExchange: prefix + "notifications.dlx",
		DeadLetterQueue:    prefix + "notifications.send.dlq",
		RetryDelay:         retryDelay,
	}
}

// schedule is the retry schedule, never empty.
func (t Topology) schedule() []time.Duration {
	if len(t.RetryDelays) == 0 {
		return []time.Duration{t.RetryDelay}
	}
	return t.RetryDelays
}

// RetryDelayFor is the delay of the n-th retry of a message (n >= 1): the
// n-th of the schedule, or its last.
func (t Topology) RetryDelayFor(n int) time.Duration {
	s := t.schedule()
	return s[max(0, min(n, len(s))-1)]
}

// RetryQueueFor is the retry queue the n-th retry of a message (n >= 1)
// waits in.
func (t Topology) RetryQueueFor(n int) string {
	return t.retryQueueOf(t.RetryDelayFor(n))
}

// retryQueueOf names the retry queue of delay d.
func (t Topology) retryQueueOf(d time.Duration) string {
	if d == t.schedule()[0] {
		return t.RetryQueue
	}
	return t.RetryQueue + "." + shortDuration(d)
}

// RetryQueues lists the retry queues, one per distinct delay of the
// schedule, in schedule order, with their delays.
func (t Topology) RetryQueues() []RetryQueue {
	var out []RetryQueue
	seen := map[time.Duration]bool{}
	for _, d := range t.schedule() {
		if seen[d] {
			continue
		}
		seen[d] = true
		out = append(out, RetryQueue{Name: t.retryQueueOf(d), Delay: d})
	}
	return out
}

// RetryQueue is one retry queue of the schedule.
type RetryQueue struct {
	// Name is the queue's name.
	Name string
	// Delay is its x-message-ttl.
	Delay time.Duration
}

// Queues lists every queue of the topology: the send queue, the retry
// queues and the dead-letter queue.
func (t Topology) Queues() []string {
	out := []string{t.SendQueue}
	for _, q := range t.RetryQueues() {
		out = append(out, q.Name)
	}
	return append(out, t.DeadLetterQueue)
}

// shortDuration writes d as time.Duration does, without the zero units it
// ends in: 5m rather than 5m0s, 2h rather than 2h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// quorum reports whether the queues are quorum queues.
func (t Topology) quorum() bool { return t.QueueType != QueueClassic }

// queueArgs are the arguments of a queue of the topology: deadLetter is the
// exchange it dead-letters to ("" for none), with routing key key ("" to
// keep the message's), and ttl its x-message-ttl (0 for none). A classic
// queue has exactly the contract's arguments; a quorum queue adds its type
// and at-least-once dead-lettering, which needs the reject-publish overflow
// behaviour.
func (t Topology) queueArgs(deadLetter, key string, ttl time.Duration) amqp.Table {
	args := amqp.Table{}
	if ttl > 0 {
		args["x-message-ttl"] = ttl.Milliseconds()
	}
	if deadLetter != "" {
		args["x-dead-letter-exchange"] = deadLetter
	}
	if key != "" {
		args["x-dead-letter-routing-key"] = key
	}
	if t.quorum() {
		args["x-queue-type"] = QueueQuorum
		if deadLetter != "" {
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
	}
	if len(args) == 0 {
		return nil
	}
	return args
}

// Declare declares the whole topology. It is idempotent; when something
// already exists with other settings it fails with ErrTopologyMismatch and
// the broker closes ch.
func (t Topology) Declare(ch *amqp.Channel) error {
	for _, x := range []string{t.Exchange, t.DeadLetterExchange} {
		if err := ch.ExchangeDeclare(x, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			return t.declareError("exchange", x, err)
		}
	}
	type queue struct {
		name string
		args amqp.Table
	}
	queues := []queue{{t.SendQueue, t.queueArgs(t.DeadLetterExchange, "", 0)}}
	for _, q := range t.RetryQueues() {
		queues = append(queues, queue{q.Name, t.queueArgs(t.Exchange, RoutingKey, q.Delay)})
	}
	queues = append(queues, queue{t.DeadLetterQueue, t.queueArgs("", "", 0)})
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return t.declareError("queue", q.name, err)
		}
	}
	if err := ch.QueueBind(t.SendQueue, RoutingKey, t.Exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to exchange %q: %w", t.SendQueue, t.Exchange, err)
	}
	if err := ch.QueueBind(t.DeadLetterQueue, "#", t.DeadLetterExchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to exchange %q: %w", t.DeadLetterQueue, t.DeadLetterExchange, err)
	}
	return nil
}

// declareError explains a failed declaration; a mismatch says what to do.
func (t Topology) declareError(kind, name string, err error) error {
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
		return fmt.Errorf("declare %s %q: %w", kind, name, err)
	}
	hint := ""
	if kind == "queue" {
		qtype := t.QueueType
		if qtype == "" {
			qtype = QueueQuorum
		}
		switch {
		case strings.Contains(aerr.Reason, "x-queue-type"), strings.Contains(aerr.Reason, "x-dead-letter-strategy"),
			strings.Contains(aerr.Reason, "x-overflow"):
			hint = fmt.Sprintf(" (it was declared with another queue type than %s: let the workers drain the queues, "+
				"then delete %s, or set the queue type they were declared with (HERALD_QUEUE_TYPE))",
				qtype, strings.Join(t.Queues(), ", "))
		case strings.Contains(aerr.Reason, "x-message-ttl"):
			hint = fmt.Sprintf(" (was the retry delay changed? every process must use the same schedule; "+
				"delete the queue %s once it is empty, or restore the setting)", name)
		default:
			hint = " (delete the queue or restore the setting it was declared with)"
		}
	}
	return fmt.Errorf("declare %s %q: %w: it already exists with other arguments%s: %s",
		kind, name, ErrTopologyMismatch, hint, aerr.Reason)
}

// Delete removes the prefixed topology of cfg, messages included. Missing
// exchanges and queues are not an error. Tests clean up with it.
func Delete(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	conn, err := cfg.dial(ctx, "admin")
	if err != nil {
		return err
	}
	defer conn.Close()
	t := cfg.Topology()

	var errs []error
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	do := func(what string, op func(*amqp.Channel) error) {
		if ch == nil {
			return
		}
		err := op(ch)
		if err == nil {
			return
		}
		var aerr *amqp.Error
		if !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
			errs = append(errs, fmt.Errorf("delete %s: %w", what, err))
		}
		// A channel error closed the channel; carry on with a new one.
		if ch.IsClosed() {
			if ch, err = conn.Channel(); err != nil {
				errs = append(errs, fmt.Errorf("open channel: %w", err))
				ch = nil
			}
		}
	}
	for _, q := range t.Queues() {
		do("queue "+q, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(q, false, false, false)
			return err
		})
	}
	for _, x := range []string{t.Exchange, t.DeadLetterExchange} {
		do("exchange "+x, func(ch *amqp.Channel) error { return ch.ExchangeDelete(x, false, false) })
	}
	return errors.Join(errs...)
}
