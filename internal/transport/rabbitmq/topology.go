package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/notify"
)

// RoutingKey routes notification.requested events to the send queue. It is
// never prefixed.
const RoutingKey = notify.EventRequested

// RoutingKeyHigh routes the notification.requested events of high
// priority notifications to the high send queue (issue 34, point 5). It
// is never prefixed.
const RoutingKeyHigh = notify.EventRequested + ".high"

// highPriority is the AMQP priority a high notification's messages carry:
// a queue that honours priorities (a RabbitMQ 4 quorum queue, where above
// 4 is high; a classic queue declared with x-max-priority) delivers them
// first wherever they are, retry copies in the send queue included. The
// others carry none (normal).
const highPriority = 9

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
	// HeaderPublishedAt holds when the relay published the event, in Unix
	// microseconds (the time-in-broker histogram); copies keep it.
	HeaderPublishedAt = "x-published-at"
	// HeaderTraceparent holds the W3C trace context of the event's publish
	// span; retry, hand-back and dead-letter copies keep it.
	HeaderTraceparent = "traceparent"
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
//
// Parked deliveries (Release with a wait) wait in the park queues, one per
// delay of a fixed series from 1s to 1m (see ParkQueues), named ParkQueue followed by a dot and the delay
// ("notifications.park.1s" ... "notifications.park.1m"); each dead-letters
// to the send queue alone (see ParkQueueFor).
type Topology struct {
	// Exchange receives the relay's events (topic, durable).
	Exchange string
	// SendQueue is what workers consume, bound to Exchange with RoutingKey.
	SendQueue string
	// HighQueue is what workers consume beside SendQueue, each with a
	// prefetch window of its own, bound to Exchange with RoutingKeyHigh:
	// the first delivery of a high priority notification waits behind no
	// other priority's backlog in the broker (issue 34, point 5). Empty:
	// no high lane, every event goes to SendQueue.
	HighQueue string
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
	// ParkQueue is the stem of the park queues' names: each is ParkQueue,
	// a dot and its delay.
	ParkQueue string
}

// NewTopology returns the contract's names with prefix prepended to each.
func NewTopology(prefix string, retryDelay time.Duration) Topology {
	return Topology{
		Exchange:           prefix + "notifications",
		SendQueue:          prefix + "notifications.send",
		HighQueue:          prefix + "notifications.send.high",
		RetryQueue:         prefix + "notifications.retry",
		DeadLetterExchange: prefix + "notifications.dlx",
		DeadLetterQueue:    prefix + "notifications.send.dlq",
		RetryDelay:         retryDelay,
		ParkQueue:          prefix + "notifications.park",
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

// parkDelays are the waits of the park queues, shortest first. A parked
// message waits in the queue of the shortest delay that is at least the
// wait asked for, or in the longest one, so it comes back late by less
// than the step between two delays, never early (except past the longest,
// when its consumer parks it again for the rest). The worker parks a
// delivery until its channel's or destination's gate tries again (1s to
// 60s, doubling), its rate turn, or a few seconds when the store is
// unreachable: a 1-2-5 series up to a minute keeps the lateness of those
// within 2.5 times the wait (at most 20s, past 10s) with six queues. The
// floor of 1s is deliberate: whatever the wait asked for, a parked message
// costs its consumer at most one delivery a second, so a caller that keeps
// parking for a few milliseconds cannot make it loop.
//
// The name of a park queue spells its delay, so a later release may change
// this list without any queue being redeclared with another TTL: the old
// queues drain and are left unused.
var parkDelays = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute,
}

// ParkQueues lists the park queues, shortest delay first, with their
// delays: 1s, 2s, 5s, 10s, 30s and 1m (see parkDelays for why).
func (t Topology) ParkQueues() []DelayQueue {
	out := make([]DelayQueue, len(parkDelays))
	for i, d := range parkDelays {
		out[i] = DelayQueue{Name: t.ParkQueue + "." + shortDuration(d), Delay: d}
	}
	return out
}

// ParkQueueFor is the park queue a message released for after (> 0) waits
// in: the shortest whose delay is at least after, or the longest.
func (t Topology) ParkQueueFor(after time.Duration) DelayQueue {
	qs := t.ParkQueues()
	for _, q := range qs {
		if q.Delay >= after {
			return q
		}
	}
	return qs[len(qs)-1]
}

// DelayQueue is a queue whose messages wait its delay (its x-message-ttl)
// and then go back to be delivered: a park queue.
type DelayQueue struct {
	// Name is the queue's name.
	Name string
	// Delay is its x-message-ttl.
	Delay time.Duration
}

// Queues lists every queue of the topology: the send queue, the high
// lane, the retry queues, the park queues and the dead-letter queue.
func (t Topology) Queues() []string {
	out := []string{t.SendQueue}
	if t.HighQueue != "" {
		out = append(out, t.HighQueue)
	}
	for _, q := range t.RetryQueues() {
		out = append(out, q.Name)
	}
	for _, q := range t.ParkQueues() {
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

// deadLetterTo is where a queue dead-letters: to exchange ("" is the
// default exchange, which routes by queue name), with routing key key (""
// keeps the message's). The zero value dead-letters nowhere.
type deadLetterTo struct {
	on            bool
	exchange, key string
}

// queueArgs are the arguments of a queue of the topology: dl is where it
// dead-letters, and ttl its x-message-ttl (0 for none). A classic queue has
// exactly the contract's arguments; a quorum queue adds its type and
// at-least-once dead-lettering, which needs the reject-publish overflow
// behaviour.
func (t Topology) queueArgs(dl deadLetterTo, ttl time.Duration) amqp.Table {
	args := amqp.Table{}
	if ttl > 0 {
		args["x-message-ttl"] = ttl.Milliseconds()
	}
	if dl.on {
		args["x-dead-letter-exchange"] = dl.exchange
	}
	if dl.key != "" {
		args["x-dead-letter-routing-key"] = dl.key
	}
	if t.quorum() {
		args["x-queue-type"] = QueueQuorum
		if dl.on {
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
	}
	if len(args) == 0 {
		return nil
	}
	return args
}

// DeclareRoute declares what a publisher of events needs and nothing that
// depends on the retry schedule: the exchanges Exchange and
// DeadLetterExchange, SendQueue bound to Exchange with RoutingKey, and
// DeadLetterQueue bound to DeadLetterExchange (the send queue dead-letters
// there). The relay declares this much: it publishes to Exchange only, so
// it never carries the workers' retry schedule, and a relay started with
// another HERALD_RETRY_DELAY than the workers' works. It is idempotent;
// when something already exists with other settings (another queue type)
// it fails with ErrTopologyMismatch and the broker closes ch.
func (t Topology) DeclareRoute(ch *amqp.Channel) error {
	for _, x := range []string{t.Exchange, t.DeadLetterExchange} {
		if err := ch.ExchangeDeclare(x, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			return t.declareError("exchange", x, err)
		}
	}
	type queue struct {
		name string
		args amqp.Table
	}
	queues := []queue{
		{t.SendQueue, t.queueArgs(deadLetterTo{on: true, exchange: t.DeadLetterExchange}, 0)},
		{t.DeadLetterQueue, t.queueArgs(deadLetterTo{}, 0)},
	}
	if t.HighQueue != "" {
		queues = append(queues, queue{t.HighQueue, t.queueArgs(deadLetterTo{on: true, exchange: t.DeadLetterExchange}, 0)})
	}
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return t.declareError("queue", q.name, err)
		}
	}
	if err := ch.QueueBind(t.SendQueue, RoutingKey, t.Exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to exchange %q: %w", t.SendQueue, t.Exchange, err)
	}
	if t.HighQueue != "" {
		if err := ch.QueueBind(t.HighQueue, RoutingKeyHigh, t.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %q to exchange %q: %w", t.HighQueue, t.Exchange, err)
		}
	}
	if err := ch.QueueBind(t.DeadLetterQueue, "#", t.DeadLetterExchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to exchange %q: %w", t.DeadLetterQueue, t.DeadLetterExchange, err)
	}
	return nil
}

// Declare declares the whole topology: DeclareRoute's names, and the
// retry queues (whose TTLs are the retry schedule) and park queues, which
// only the workers publish to. The workers own the retry schedule: they
// declare the retry queues, and every worker must run with the same
// schedule, for a queue's TTL is fixed when it is first declared. It is
// idempotent; when something already exists with other settings it fails
// with ErrTopologyMismatch and the broker closes ch.
func (t Topology) Declare(ch *amqp.Channel) error {
	if err := t.DeclareRoute(ch); err != nil {
		return err
	}
	type queue struct {
		name string
		args amqp.Table
	}
	var queues []queue
	for _, q := range t.RetryQueues() {
		queues = append(queues, queue{q.Name, t.queueArgs(deadLetterTo{on: true, exchange: t.Exchange, key: RoutingKey}, q.Delay)})
	}
	// A parked message goes back through the default exchange to the send
	// queue alone: a delivery may be parked many times during an outage,
	// and every binding of the notifications exchange would get a copy of
	// each park otherwise.
	for _, q := range t.ParkQueues() {
		queues = append(queues, queue{q.Name, t.queueArgs(deadLetterTo{on: true, exchange: "", key: t.SendQueue}, q.Delay)})
	}
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return t.declareError("queue", q.name, err)
		}
	}
	return nil
}

// declareError explains a failed declaration. A mismatch says which
// argument differs, what the broker holds and what this process asked for,
// and what to do about it.
func (t Topology) declareError(kind, name string, err error) error {
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
		return fmt.Errorf("declare %s %q: %w", kind, name, err)
	}
	diff := ""
	arg, ok := parseInequivalentArg(aerr.Reason)
	if ok {
		diff = fmt.Sprintf(": the broker holds it (vhost %q) with %s %s; this process asked for %s",
			arg.vhost, arg.arg, arg.current.describe(arg.arg), arg.received.describe(arg.arg))
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
		case strings.Contains(aerr.Reason, "x-message-ttl") && strings.HasPrefix(name, t.ParkQueue+"."):
			// A park queue's TTL is fixed by its name, not by a setting.
			hint = " (herald declares a park queue with the TTL its name spells: delete the queue; " +
				"the parked messages in it are lost, and their notifications get fresh events once HERALD_RECONCILE_AFTER has passed)"
		case strings.Contains(aerr.Reason, "x-message-ttl"):
			hint = t.retryDelayHint(name, arg, ok)
		default:
			hint = " (delete the queue or restore the setting it was declared with)"
		}
	}
	return fmt.Errorf("declare %s %q: %w: it already exists with other arguments%s%s (broker: %s)",
		kind, name, ErrTopologyMismatch, diff, hint, aerr.Reason)
}

// retryDelayHint says how to cure a retry queue whose x-message-ttl (the
// retry delay) differs from this process's: only a worker declares retry
// queues, so this process is a worker that disagrees with the others (or
// with the ones before it).
func (t Topology) retryDelayHint(name string, arg inequivalentArg, parsed bool) string {
	restore := "start with the retry delay the other workers use (HERALD_RETRY_DELAY)"
	if parsed && !arg.current.set {
		restore = "" // no herald process declares a retry queue without a TTL
	}
	if parsed && arg.current.set {
		if ms, err := strconv.ParseInt(arg.current.value, 10, 64); err == nil && ms > 0 {
			d := shortDuration(time.Duration(ms) * time.Millisecond)
			switch {
			case name != t.RetryQueue:
				// The name of a further retry queue spells its delay: the
				// queue was not declared by herald with this name's delay.
				restore = ""
			case len(t.RetryDelays) > 1:
				restore = fmt.Sprintf("start with a HERALD_RETRY_DELAY schedule whose first delay is %s, as the other workers do", d)
			default:
				restore = fmt.Sprintf("start with HERALD_RETRY_DELAY=%s as the other workers do", d)
			}
		}
	}
	if restore != "" {
		restore += ", or "
	}
	vhost := ""
	if parsed && arg.vhost != "/" {
		vhost = " -p " + arg.vhost
	}
	return fmt.Sprintf("; the workers own the retry queues, so every worker must use the same retry schedule "+
		"(a relay or an API declares none and may run with any): %sdelete the queue (rabbitmqctl delete_queue%s %s; "+
		"the retries waiting in it are lost, and their notifications, still pending, get fresh events once "+
		"HERALD_RECONCILE_AFTER has passed) and start again", restore, vhost, name)
}

// inequivalentArg is what a 406 reply to a declaration says: argument arg
// of name in vhost differs.
type inequivalentArg struct {
	arg, name, vhost  string
	received, current argValue
}

// argValue is one side of an inequivalent argument.
type argValue struct {
	// set is false for the broker's "none": the argument is absent.
	set   bool
	value string
}

// describe writes the value for a message; an x-message-ttl in
// milliseconds also as a duration.
func (v argValue) describe(arg string) string {
	if !v.set {
		return "none"
	}
	if arg == "x-message-ttl" {
		if ms, err := strconv.ParseInt(v.value, 10, 64); err == nil && ms > 0 {
			return fmt.Sprintf("%s (%s)", v.value, shortDuration(time.Duration(ms)*time.Millisecond))
		}
	}
	return v.value
}

// inequivalentRE matches the reply text of RabbitMQ 3.x and 4.x, whose two
// values each read "none", "'V'" or "the value 'V' of type 'T'":
//
//	inequivalent arg 'x-message-ttl' for queue 'notifications.retry' in vhost '/': received '1000' but current is '30000'
//	... received the value '1000' of type 'long' but current is none
//	... received none but the current is the value 'x' of type 'longstr'
var inequivalentRE = regexp.MustCompile(`inequivalent arg '([^']*)' for (?:queue|exchange) '([^']*)' in vhost '([^']*)': ` +
	`received (none|'[^']*'|the value '[^']*' of type '[^']*') but (?:the )?current is (none|'[^']*'|the value '[^']*' of type '[^']*')`)

// argValueRE pulls the value out of "'V'" or "the value 'V' of type 'T'".
var argValueRE = regexp.MustCompile(`^(?:the value )?'([^']*)'`)

// parseInequivalentArg reads a 406 reply text; ok is false for any other.
func parseInequivalentArg(reason string) (inequivalentArg, bool) {
	m := inequivalentRE.FindStringSubmatch(reason)
	if m == nil {
		return inequivalentArg{}, false
	}
	value := func(s string) argValue {
		if v := argValueRE.FindStringSubmatch(s); v != nil {
			return argValue{set: true, value: v[1]}
		}
		return argValue{}
	}
	return inequivalentArg{arg: m[1], name: m[2], vhost: m[3], received: value(m[4]), current: value(m[5])}, true
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

// DeclareTopology declares cfg's whole topology (Topology.Declare) on a
// connection of its own, as a worker does at start (and its consumer again
// on every connection). A topology the broker holds with other arguments
// fails with ErrTopologyMismatch, marked notify.Permanent: the error says
// what differs and how to cure it. Any other error (the broker
// unreachable) may pass.
func DeclareTopology(ctx context.Context, cfg Config) error {
	return declareAtStart(ctx, cfg, Topology.Declare)
}

// DeclareRouteTopology declares what a publisher of events uses
// (Topology.DeclareRoute) on a connection of its own, as a relay does at
// start (and its publisher again on every connection): never the retry
// queues, so a relay does not carry the workers' retry schedule. Its
// errors are DeclareTopology's.
func DeclareRouteTopology(ctx context.Context, cfg Config) error {
	return declareAtStart(ctx, cfg, Topology.DeclareRoute)
}

// declareAtStart runs declare on a connection of its own.
func declareAtStart(ctx context.Context, cfg Config, declare func(Topology, *amqp.Channel) error) error {
	// openConn closes the connection when ctx ends: that ends a
	// declaration the broker never answers.
	cfg, conn, stop, err := openConn(ctx, cfg, "start-up check")
	if err != nil {
		return err
	}
	defer stop()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := declare(cfg.Topology(), ch); err != nil {
		if errors.Is(err, ErrTopologyMismatch) {
			return notify.Permanent(err)
		}
		return err
	}
	return nil
}
