package rabbitmq_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

func TestNewTopologyNames(t *testing.T) {
	t.Parallel()
	top := rabbitmq.NewTopology("p.", 2*time.Second)
	require.Equal(t, rabbitmq.Topology{
		Exchange:           "p.notifications",
		SendQueue:          "p.notifications.send",
		HighQueue:          "p.notifications.send.high",
		RetryQueue:         "p.notifications.retry",
		DeadLetterExchange: "p.notifications.dlx",
		DeadLetterQueue:    "p.notifications.send.dlq",
		RetryDelay:         2 * time.Second,
		ParkQueue:          "p.notifications.park",
	}, top)
	require.Equal(t, "notifications.send", rabbitmq.NewTopology("", time.Second).SendQueue)
	require.Equal(t, 30*time.Second, rabbitmq.Config{}.Topology().RetryDelay, "default retry delay")
	require.Equal(t, []rabbitmq.RetryQueue{{Name: "p.notifications.retry", Delay: 2 * time.Second}}, top.RetryQueues())
	require.Equal(t, "p.notifications.retry", top.RetryQueueFor(1))
	require.Equal(t, "p.notifications.retry", top.RetryQueueFor(7))
}

func TestRetryScheduleQueues(t *testing.T) {
	t.Parallel()
	s, m := time.Second, time.Minute
	cfg := rabbitmq.Config{Settings: consume.Settings{Prefix: "p.", RetryDelays: []time.Duration{30 * s, 5 * m, 30 * s, 90 * m, 2 * time.Hour, 1500 * time.Millisecond}}}
	top := cfg.Topology()
	require.Equal(t, 30*s, top.RetryDelay, "the first delay is the retry queue's")
	require.Equal(t, []rabbitmq.RetryQueue{
		{Name: "p.notifications.retry", Delay: 30 * s},
		{Name: "p.notifications.retry.5m", Delay: 5 * m},
		{Name: "p.notifications.retry.1h30m", Delay: 90 * m},
		{Name: "p.notifications.retry.2h", Delay: 2 * time.Hour},
		{Name: "p.notifications.retry.1.5s", Delay: 1500 * time.Millisecond},
	}, top.RetryQueues())
	for n, want := range map[int]string{
		1: "p.notifications.retry", 2: "p.notifications.retry.5m", 3: "p.notifications.retry",
		4: "p.notifications.retry.1h30m", 5: "p.notifications.retry.2h", 6: "p.notifications.retry.1.5s",
		7: "p.notifications.retry.1.5s", 100: "p.notifications.retry.1.5s",
	} {
		require.Equal(t, want, top.RetryQueueFor(n), "retry %d", n)
	}
	require.Equal(t, 5*m, top.RetryDelayFor(2))
	require.Equal(t, []string{
		"p.notifications.send", "p.notifications.send.high", "p.notifications.retry", "p.notifications.retry.5m", "p.notifications.retry.1h30m",
		"p.notifications.retry.2h", "p.notifications.retry.1.5s",
		"p.notifications.park.1s", "p.notifications.park.2s", "p.notifications.park.5s", "p.notifications.park.10s",
		"p.notifications.park.30s", "p.notifications.park.1m",
		"p.notifications.send.dlq",
	}, top.Queues())
}

// TestParkQueueFor: a parked message waits in the shortest park queue that
// is at least its wait (never early), or in the longest.
func TestParkQueueFor(t *testing.T) {
	t.Parallel()
	top := rabbitmq.NewTopology("p.", time.Second)
	for after, want := range map[time.Duration]string{
		time.Nanosecond:                    "p.notifications.park.1s",
		300 * time.Millisecond:             "p.notifications.park.1s",
		time.Second:                        "p.notifications.park.1s",
		time.Second + time.Millisecond:     "p.notifications.park.2s",
		2 * time.Second:                    "p.notifications.park.2s",
		3 * time.Second:                    "p.notifications.park.5s",
		7 * time.Second:                    "p.notifications.park.10s",
		11 * time.Second:                   "p.notifications.park.30s",
		45 * time.Second:                   "p.notifications.park.1m",
		time.Minute:                        "p.notifications.park.1m",
		time.Hour:                          "p.notifications.park.1m",
		time.Minute + 500*time.Millisecond: "p.notifications.park.1m",
	} {
		q := top.ParkQueueFor(after)
		require.Equal(t, want, q.Name, "after %s", after)
		if after <= time.Minute {
			require.GreaterOrEqual(t, q.Delay, after, "never early")
		}
	}
	var prev time.Duration
	for _, q := range top.ParkQueues() {
		require.Greater(t, q.Delay, prev, "shortest first")
		prev = q.Delay
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]rabbitmq.Config{
		"no url":          {},
		"bad url":         {URL: "http://example.com/"},
		"prefetch":        {URL: "amqp://127.0.0.1/", Settings: consume.Settings{Prefetch: -1}},
		"retry delay":     {URL: "amqp://127.0.0.1/", RetryDelay: time.Microsecond},
		"retry delays":    {URL: "amqp://127.0.0.1/", Settings: consume.Settings{RetryDelays: []time.Duration{time.Second, -time.Second}}},
		"queue type":      {URL: "amqp://127.0.0.1/", QueueType: "stream"},
		"bad url in list": {URL: "amqp://127.0.0.1/,http://example.com/"},
		"confirm":         {URL: "amqp://127.0.0.1/", ConfirmTimeout: -time.Second},
		"backoff":         {URL: "amqp://127.0.0.1/", Settings: consume.Settings{ReconnectMin: time.Second, ReconnectMax: time.Millisecond}},
		"shutdown grace":  {URL: "amqp://127.0.0.1/", Settings: consume.Settings{ShutdownGrace: -time.Second}},
	} {
		_, err := rabbitmq.NewPublisher(cfg)
		require.Error(t, err, name)
		_, err = rabbitmq.NewConsumer(cfg)
		require.Error(t, err, name)
	}
	_, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: "amqp://guest:secret@127.0.0.1:1/"})
	require.NoError(t, err, "the constructor must not connect")
	_, err = rabbitmq.NewConsumer(rabbitmq.Config{URL: "amqp://127.0.0.1:1/, amqp://127.0.0.1:2/", QueueType: rabbitmq.QueueClassic})
	require.NoError(t, err, "a list of nodes")
}

// queueArguments lists the durable flag and arguments of the named queues
// as the broker holds them.
func queueArguments(t *testing.T, names ...string) map[string]map[string]any {
	t.Helper()
	out := rabbitmqctl(t, "-q", "--formatter", "json", "list_queues", "name", "durable", "arguments")
	var queues []struct {
		Name      string  `json:"name"`
		Durable   bool    `json:"durable"`
		Arguments [][]any `json:"arguments"` // [key, type, value]
	}
	require.NoError(t, json.Unmarshal(out, &queues), "list_queues output: %s", out)
	got := map[string]map[string]any{}
	for _, q := range queues {
		if slices.Contains(names, q.Name) {
			require.True(t, q.Durable, q.Name)
			args := map[string]any{}
			for _, a := range q.Arguments {
				require.Len(t, a, 3)
				args[a[0].(string)] = a[2]
			}
			got[q.Name] = args
		}
	}
	return got
}

// TestDeclareIdempotentWithContractArguments: classic queues have exactly
// the contract's arguments, as before quorum queues.
func TestDeclareIdempotentWithContractArguments(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.QueueType = rabbitmq.QueueClassic
	top := cfg.Topology()
	ch := adminChannel(t, cfg)
	require.NoError(t, top.Declare(ch))
	require.NoError(t, top.Declare(ch), "declaring twice")

	require.Equal(t, withParkQueues(top, map[string]map[string]any{
		top.SendQueue: {"x-dead-letter-exchange": top.DeadLetterExchange},
		top.HighQueue: {"x-dead-letter-exchange": top.DeadLetterExchange},
		top.RetryQueue: {
			"x-message-ttl":             float64(60000),
			"x-dead-letter-exchange":    top.Exchange,
			"x-dead-letter-routing-key": "notification.requested",
		},
		top.DeadLetterQueue: {},
	}, nil), queueArguments(t, top.Queues()...))
}

// withParkQueues adds to want the arguments of top's park queues: their
// TTL, and dead-lettering through the default exchange to the send queue
// alone, plus extra (a quorum queue's).
func withParkQueues(top rabbitmq.Topology, want map[string]map[string]any, extra map[string]any) map[string]map[string]any {
	for _, q := range top.ParkQueues() {
		args := map[string]any{
			"x-message-ttl":             float64(q.Delay.Milliseconds()),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": top.SendQueue,
		}
		for k, v := range extra {
			args[k] = v
		}
		want[q.Name] = args
	}
	return want
}

// TestDeclareQuorumWithAtLeastOnceDeadLettering: the default queue type,
// with one retry queue per distinct delay of the schedule.
func TestDeclareQuorumWithAtLeastOnceDeadLettering(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.RetryDelays = []time.Duration{time.Minute, 5 * time.Minute, time.Minute}
	top := cfg.Topology()
	require.Equal(t, rabbitmq.QueueQuorum, top.QueueType, "the default")
	ch := adminChannel(t, cfg)
	require.NoError(t, top.Declare(ch))
	require.NoError(t, top.Declare(ch), "declaring twice")

	retry := func(ttl float64) map[string]any {
		return map[string]any{
			"x-queue-type":              "quorum",
			"x-message-ttl":             ttl,
			"x-dead-letter-exchange":    top.Exchange,
			"x-dead-letter-routing-key": "notification.requested",
			"x-dead-letter-strategy":    "at-least-once",
			"x-overflow":                "reject-publish",
		}
	}
	require.Equal(t, withParkQueues(top, map[string]map[string]any{
		top.SendQueue: {
			"x-queue-type":           "quorum",
			"x-dead-letter-exchange": top.DeadLetterExchange,
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		},
		top.HighQueue: {
			"x-queue-type":           "quorum",
			"x-dead-letter-exchange": top.DeadLetterExchange,
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		},
		top.RetryQueue:         retry(60000),
		top.RetryQueue + ".5m": retry(300000),
		top.DeadLetterQueue:    {"x-queue-type": "quorum"},
	}, map[string]any{
		"x-queue-type":           "quorum",
		"x-dead-letter-strategy": "at-least-once",
		"x-overflow":             "reject-publish",
	}), queueArguments(t, top.Queues()...))
}

// TestDeclareOtherQueueTypeFailsPlainly: a topology declared with one queue
// type cannot be used with the other; the error says what to delete.
func TestDeclareOtherQueueTypeFailsPlainly(t *testing.T) {
	t.Parallel()
	for _, from := range []string{rabbitmq.QueueClassic, rabbitmq.QueueQuorum} {
		cfg := setup(t)
		cfg.QueueType = from
		declared(t, cfg)
		other := cfg
		other.QueueType = map[string]string{rabbitmq.QueueClassic: rabbitmq.QueueQuorum, rabbitmq.QueueQuorum: rabbitmq.QueueClassic}[from]
		err := other.Topology().Declare(adminChannel(t, cfg))
		require.ErrorIs(t, err, rabbitmq.ErrTopologyMismatch, "from %s", from)
		require.ErrorContains(t, err, "another queue type than "+other.QueueType)
		require.ErrorContains(t, err, "HERALD_QUEUE_TYPE")
		for _, q := range cfg.Topology().Queues() {
			require.ErrorContains(t, err, q, "the error names every queue to delete")
		}

		c, err := rabbitmq.NewConsumer(other)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		err = c.Consume(ctx, nil)
		cancel()
		require.ErrorIs(t, err, rabbitmq.ErrTopologyMismatch, "Consume must give up on a topology it cannot use")
	}
}

func TestDeclareChangedRetryDelayFailsPlainly(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	declared(t, cfg)

	changed := cfg
	changed.RetryDelay = 2 * time.Minute
	err := changed.Topology().Declare(adminChannel(t, cfg))
	require.ErrorIs(t, err, rabbitmq.ErrTopologyMismatch)
	require.ErrorContains(t, err, cfg.Topology().RetryQueue)
	require.ErrorContains(t, err, "already exists with other arguments")
	require.ErrorContains(t, err, "HERALD_RETRY_DELAY=1m as the other workers do")

	// The publisher (the relay's) declares no retry queue: the schedule
	// is the workers', and another one publishes as well.
	p := newPublisher(t, changed)
	confirmed, err := p.Publish(context.Background(), events(1, 1))
	require.NoError(t, err)
	require.Equal(t, []int64{1}, confirmed)

	c, err := rabbitmq.NewConsumer(changed)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err = c.Consume(ctx, nil)
	require.ErrorIs(t, err, rabbitmq.ErrTopologyMismatch, "Consume must give up on a topology it cannot use")
}

func TestPinger(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, rabbitmq.Pinger{URL: cfg.URL}.Ping(ctx))

	err := rabbitmq.Pinger{URL: "amqp://guest:secret@127.0.0.1:1/"}.Ping(ctx)
	require.Error(t, err, "nothing listens on port 1")
	require.NotContains(t, err.Error(), "secret")
	require.Error(t, rabbitmq.Pinger{}.Ping(ctx), "no URL")
}

// TestDeclareChangedRetryDelayExplains: a worker started with a retry
// delay of 1s after others declared the retry queue with 30s gets an error
// that names the queue, both delays, the owner of the schedule and the two
// ways out, and it is permanent (the worker stops on it).
func TestDeclareChangedRetryDelayExplains(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.RetryDelay = 30 * time.Second
	declared(t, cfg)
	queue := cfg.Topology().RetryQueue

	changed := cfg
	changed.RetryDelay = time.Second
	err := rabbitmq.DeclareTopology(t.Context(), changed)
	require.ErrorIs(t, err, rabbitmq.ErrTopologyMismatch)
	require.True(t, notify.IsPermanent(err), "the worker must stop: %v", err)
	for _, want := range []string{
		`queue "` + queue + `"`,
		"x-message-ttl 30000 (30s)",
		"this process asked for 1000 (1s)",
		"the workers own the retry queues",
		"start with HERALD_RETRY_DELAY=30s as the other workers do",
		"rabbitmqctl delete_queue " + queue + ";",
		"HERALD_RECONCILE_AFTER",
	} {
		require.ErrorContains(t, err, want)
	}
	t.Log(err)

	// A schedule whose first delay differs: the same queue, the advice
	// speaks of the schedule's first delay.
	changed.RetryDelays = []time.Duration{time.Second, time.Minute}
	err = changed.Topology().Declare(adminChannel(t, cfg))
	require.ErrorIs(t, err, rabbitmq.ErrTopologyMismatch)
	require.ErrorContains(t, err, "a HERALD_RETRY_DELAY schedule whose first delay is 30s")
}

// TestDeclareTopologyAtStart: what a process runs at start declares the
// topology; a mismatch is permanent (the process exits with the fix), an
// unreachable broker is not (the process waits for it).
func TestDeclareTopologyAtStart(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	// Each declaration has the whole wait: under load a handshake is slow.
	ctx := t.Context()
	require.NoError(t, rabbitmq.DeclareTopology(ctx, cfg))
	require.NoError(t, rabbitmq.DeclareTopology(ctx, cfg), "idempotent")
	require.NotEmpty(t, queueArguments(t, cfg.Topology().RetryQueue))

	changed := cfg
	changed.RetryDelay = 2 * time.Minute
	err := rabbitmq.DeclareTopology(ctx, changed)
	require.ErrorIs(t, err, rabbitmq.ErrTopologyMismatch)
	require.True(t, notify.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "HERALD_RETRY_DELAY=1m as the other workers do")
	// A relay's declaration does not look at the retry schedule.
	require.NoError(t, rabbitmq.DeclareRouteTopology(ctx, changed))

	err = rabbitmq.DeclareTopology(ctx, rabbitmq.Config{URL: "amqp://guest:secret@127.0.0.1:1/"})
	require.Error(t, err)
	require.False(t, notify.IsPermanent(err), "an unreachable broker is waited for: %v", err)
	require.NotContains(t, err.Error(), "secret")
}

// TestDeclareRouteOwnsNoRetryQueue: what a relay declares, on a fresh
// vhost, is the route of its events (the exchanges, the send queue and the
// dead letters), no retry or park queue: a relay started first, with any
// HERALD_RETRY_DELAY, leaves the retry schedule to the first worker, whose
// delay then holds.
func TestDeclareRouteOwnsNoRetryQueue(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	top := cfg.Topology()
	relayCfg := cfg
	relayCfg.RetryDelay = 7 * time.Second
	require.NoError(t, rabbitmq.DeclareRouteTopology(t.Context(), relayCfg))
	got := queueArguments(t, top.Queues()...)
	require.ElementsMatch(t, []string{top.SendQueue, top.HighQueue, top.DeadLetterQueue}, slices.Collect(maps.Keys(got)))

	p := newPublisher(t, relayCfg)
	confirmed, err := p.Publish(t.Context(), events(1, 1))
	require.NoError(t, err)
	require.Equal(t, []int64{1}, confirmed, "routed to the send queue")

	require.NoError(t, rabbitmq.DeclareTopology(t.Context(), cfg), "the worker's delay is the first declared")
	require.Equal(t, float64(60000), queueArguments(t, top.RetryQueue)[top.RetryQueue]["x-message-ttl"])
	require.Equal(t, 1, queueLen(t, adminChannel(t, cfg), top.SendQueue))
}
