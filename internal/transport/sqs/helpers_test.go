package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/sqstest"
	sqstr "github.com/heraldhq/herald/internal/transport/sqs"
)

// config returns a configuration on queues of the test's own, on the
// process's goaws, through the SDK's default chain as a deployment would;
// its queues are deleted when the test ends.
func config(t *testing.T) sqstr.Config {
	t.Helper()
	srv := sqstest.Start(t)
	cfg, err := sqstr.ParseURL(srv.BrokerURL(sqstest.Prefix(t), false))
	require.NoError(t, err)
	cfg.WaitTime = time.Second
	cfg.ReconnectMin = 20 * time.Millisecond
	cfg.ReconnectMax = 200 * time.Millisecond
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, sqstr.Delete(ctx, cfg))
	})
	return cfg
}

func newPublisher(t *testing.T, cfg sqstr.Config) *sqstr.Publisher {
	t.Helper()
	p, err := sqstr.NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func peek(t *testing.T, cfg sqstr.Config) []sqstr.DeadLetter {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	dls, err := sqstr.PeekDeadLetters(ctx, cfg)
	require.NoError(t, err)
	return dls
}

func ids(evs []notify.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}
