package rabbitmq_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

func TestNewTopologyNames(t *testing.T) {
	t.Parallel()
	top := rabbitmq.NewTopology("p.", 2*time.Second)
	require.Equal(t, rabbitmq.Topology{
		Exchange:           "p.notifications",
		SendQueue:          "p.notifications.send",
		RetryQueue:         "p.notifications.retry",
		DeadLetterExchange: "p.notifications.dlx",
		DeadLetterQueue:    "p.notifications.send.dlq",
		RetryDelay:         2 * time.Second,
	}, top)
	require.Equal(t, "notifications.send", rabbitmq.NewTopology("", time.Second).SendQueue)
	require.Equal(t, 30*time.Second, rabbitmq.Config{}.Topology().RetryDelay, "default retry delay")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]rabbitmq.Config{
		"no url":         {},
		"bad url":        {URL: "http://example.com/"},
		"prefetch":       {URL: "amqp://127.0.0.1/", Prefetch: -1},
		"retry delay":    {URL: "amqp://127.0.0.1/", RetryDelay: time.Microsecond},
		"confirm":        {URL: "amqp://127.0.0.1/", ConfirmTimeout: -time.Second},
		"backoff":        {URL: "amqp://127.0.0.1/", ReconnectMin: time.Second, ReconnectMax: time.Millisecond},
		"shutdown grace": {URL: "amqp://127.0.0.1/", ShutdownGrace: -time.Second},
	} {
		_, err := rabbitmq.NewPublisher(cfg)
		require.Error(t, err, name)
		_, err = rabbitmq.NewConsumer(cfg)
		require.Error(t, err, name)
	}
	_, err := rabbitmq.NewPublisher(rabbitmq.Config{URL: "amqp://guest:secret@127.0.0.1:1/"})
	require.NoError(t, err, "the constructor must not connect")
}

func TestDeclareIdempotentWithContractArguments(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	top := cfg.Topology()
	ch := adminChannel(t, cfg)
	require.NoError(t, top.Declare(ch))
	require.NoError(t, top.Declare(ch), "declaring twice")

	out := rabbitmqctl(t, "-q", "--formatter", "json", "list_queues", "name", "durable", "arguments")
	var queues []struct {
		Name      string  `json:"name"`
		Durable   bool    `json:"durable"`
		Arguments [][]any `json:"arguments"` // [key, type, value]
	}
	require.NoError(t, json.Unmarshal(out, &queues), "list_queues output: %s", out)
	got := map[string]map[string]any{}
	for _, q := range queues {
		if q.Name == top.SendQueue || q.Name == top.RetryQueue || q.Name == top.DeadLetterQueue {
			require.True(t, q.Durable, q.Name)
			args := map[string]any{}
			for _, a := range q.Arguments {
				require.Len(t, a, 3)
				args[a[0].(string)] = a[2]
			}
			got[q.Name] = args
		}
	}
	require.Equal(t, map[string]map[string]any{
		top.SendQueue: {"x-dead-letter-exchange": top.DeadLetterExchange},
		top.RetryQueue: {
			"x-message-ttl":             float64(60000),
			"x-dead-letter-exchange":    top.Exchange,
			"x-dead-letter-routing-key": "notification.requested",
		},
		top.DeadLetterQueue: {},
	}, got)
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

	p := newPublisher(t, changed)
	_, err = p.Publish(context.Background(), events(1, 1))
	require.ErrorIs(t, err, rabbitmq.ErrTopologyMismatch)

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
