package nats_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/testkit/testlog"
	"github.com/heraldhq/herald/internal/transport/consume"
	natstr "github.com/heraldhq/herald/internal/transport/nats"
)

// config returns a configuration on srv with a name prefix of the test's
// own and short timings; the stream is deleted when the test ends.
func config(t *testing.T, srv *testenv.NATS) natstr.Config {
	t.Helper()
	cfg := natstr.Config{
		URL: srv.URL(),
		Settings: consume.Settings{
			Prefix:        "t" + testenv.Suffix() + ".",
			ReconnectMin:  20 * time.Millisecond,
			ReconnectMax:  200 * time.Millisecond,
			ShutdownGrace: 10 * time.Second,
		},
		ConfirmTimeout: 5 * time.Second,
		CheckInterval:  500 * time.Millisecond,
		ConnectionName: "herald-test",
	}
	// The transport's own log (settlement failures, retry moves held or
	// tried again) is printed with a failing test's output.
	var log testlog.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- log of the transport ---\n%s", log.String())
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, natstr.Delete(ctx, cfg), "delete stream")
	})
	return cfg
}

func newPublisher(t *testing.T, cfg natstr.Config) *natstr.Publisher {
	t.Helper()
	p, err := natstr.NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	return p
}

func ids(evs []notify.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func peek(t *testing.T, cfg natstr.Config) []natstr.PeekedDeadLetter {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	dls, err := natstr.PeekDeadLetters(ctx, cfg)
	require.NoError(t, err)
	return dls
}
