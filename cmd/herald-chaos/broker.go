package main

import (
	"context"
	"errors"
	"path"
	"strconv"
	"time"
)

// chaosBrokers are the brokers the harness runs herald on, one row each,
// in the order of `make chaos`. A row carries every hook the harness needs
// of its broker; the hooks live in the broker's own file (broker_NAME.go),
// and nothing else in the harness names a broker.
var chaosBrokers = []chaosBroker{
	{
		name: "table",
		// The outbox table is the queue: no broker, no relay.
		leftOut: []leftOut{
			{faults: []string{"broker-*"}, why: "no broker"},
			{faults: []string{"broker-restart"}, why: "no broker"},
			{faults: []string{"queue-purge"}, why: "no broker"},
			{faults: []string{"retry-queue-delete"}, why: "no broker"},
		},
	},
	{
		name:  "rabbitmq",
		start: startRabbit,
		own: []ownFault{{
			name: "retry-queue-delete", after: "smtp-throttle", est: faultPause, do: (*harness).retryQueueDelete,
			elsewhere: "retries wait in the %s stream/topic itself, not in a queue of their own",
		}},
	},
	{name: "nats", start: startNATSBroker},
	{
		name:  "kafka",
		start: startKafkaBroker,
		// Tried: kfake's DeleteRecords under a live consumer group makes
		// franz-go report lost records and reset, and the group did not
		// recover within the run; a log is not a queue an operator
		// purges, so the fault stays out until that is looked into.
		leftOut: []leftOut{{faults: []string{"queue-purge"}, why: "a Kafka topic is a log: deleting records under the group is not an operator's purge"}},
		direct:  "Kafka clients reach every broker at the address its metadata gives: no proxy in the path",
	},
	{
		name:  "sqs",
		start: startSQSBroker,
		own: []ownFault{{
			name: "visibility-expiry", after: "kill-9 worker1", est: faultPause, do: (*harness).visibilityExpiry,
			elsewhere: "SQS only",
		}},
	},
}

// chaosBroker is one broker as the harness knows it.
type chaosBroker struct {
	// name is the broker's --transport value, and its run's.
	name string
	// start starts the broker for a run (servers of the run's own, or a
	// scratch space on a shared one, each cleaned up by h.cleanups),
	// points herald at it (HERALD_BROKER_URL and whatever else it needs in
	// h.env, through h.proxyBroker where it can) and returns it, reached
	// straight. Nil for no broker: the table transport.
	start func(ctx context.Context, h *harness) (brokerRun, error)
	// direct, when set, is why herald reaches the broker without the
	// harness's fault proxies: the proxy faults are left out, and
	// broker-reset cuts the broker's own connections (its brokerRun is a
	// connCutter).
	direct string
	// leftOut are the faults the broker has no counterpart for.
	leftOut []leftOut
	// own are the faults of this broker alone.
	own []ownFault
}

// leftOut is faults (a name, or a pattern such as broker-*) a broker or a
// store leaves out of the schedule, and why, as the run's log says.
type leftOut struct {
	faults []string
	why    string
}

// ownFault is a fault only one broker or store has.
type ownFault struct {
	name string
	// after is the step of the schedule it follows.
	after string
	est   time.Duration
	do    func(h *harness, ctx context.Context) (detail string, window int, err error)
	// elsewhere is why the other brokers leave it out, %s their name; ""
	// leaves it out without a word.
	elsewhere string
}

// brokerRun is one run's broker: what the checks read of it and its
// restart fault.
type brokerRun interface {
	broker
	// restart is the fault that takes the broker away for a moment
	// (broker-restart, or kill-leader on a cluster).
	restart(h *harness) step
}

// connCutter is a broker herald reaches without the fault proxies
// (chaosBroker.direct): broker-reset cuts its connections itself.
type connCutter interface {
	// cutConns closes every open connection to the broker and returns
	// how many.
	cutConns() int
}

// drainNoter is a broker with something to say once the run drained.
type drainNoter interface {
	// drainNote returns a note for the log, or "".
	drainNote(ctx context.Context) string
}

// brokerNamed returns the row of the broker named name.
func brokerNamed(name string) *chaosBroker {
	for i := range chaosBrokers {
		if chaosBrokers[i].name == name {
			return &chaosBrokers[i]
		}
	}
	panic("chaos: no broker " + name)
}

// leaves reports whether the faults left out name fault, by its first
// word.
func leaves(out []leftOut, fault string) bool {
	for _, l := range out {
		for _, pattern := range l.faults {
			if ok, _ := path.Match(pattern, faultOf(fault)); ok {
				return true
			}
		}
	}
	return false
}

// rawMsg is a message the harness puts on the broker itself, as the relay
// would: a poison message, or a copy of an event already relayed.
type rawMsg struct {
	id   int64
	typ  string
	body []byte
	at   time.Time
}

// errNotApplicable marks a fault the transport has no counterpart for; the
// schedule leaves such faults out, this only guards a mistake.
var errNotApplicable = errors.New("not applicable to this transport")

// broker is what the faults and the checks need of one transport's broker,
// reached straight (never through the fault proxy).
type broker interface {
	// publish puts msgs where the relay publishes, each confirmed.
	publish(ctx context.Context, msgs []rawMsg) error
	// waiting counts the messages still to do in the broker's work queues
	// (sends and retries), for the drain; ok false when it cannot tell.
	waiting(ctx context.Context) (n int, where string, err error)
	// deadLetters returns the distinct message ids of the dead letters and
	// their total.
	deadLetters(ctx context.Context) (map[int64]bool, int, error)
	// purge empties the queue workers consume, as an operator's purge
	// would, and returns how many messages went.
	purge(ctx context.Context) (int, error)
}

func addID(ids map[int64]bool, s string) {
	if id, err := strconv.ParseInt(s, 10, 64); err == nil {
		ids[id] = true
	} else {
		ids[-1] = true
	}
}
