package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/testkit/transporttest"
	natstr "github.com/heraldhq/herald/internal/transport/nats"
)

// TestConformance runs the seam suite on a nats-server of the test's own,
// each subtest on a stream of its own: events go out through a Publisher,
// deliveries come from Consumers, and the dead letters are read from
// notifications.dlq.
func TestConformance(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		base := config(t, srv)
		base.RetryDelays = []time.Duration{transporttest.RetryDelay}
		pub := newPublisher(t, base)
		return transporttest.Harness{
			Publish: func(t *testing.T, evs []notify.Event) []notify.Event {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				confirmed, err := pub.Publish(ctx, evs)
				require.NoError(t, err)
				require.Equal(t, ids(evs), confirmed)
				return evs
			},
			NewSource: func(t *testing.T, sc transporttest.SourceConfig) transporttest.Source {
				t.Helper()
				cfg := base
				cfg.RetryDelays = []time.Duration{sc.RetryDelay}
				cfg.Prefetch = sc.Prefetch
				c, err := natstr.NewConsumer(cfg)
				require.NoError(t, err)
				return c
			},
			DeadLetters: func(t *testing.T) []transporttest.DeadLetter {
				t.Helper()
				var out []transporttest.DeadLetter
				for _, dl := range peek(t, base) {
					out = append(out, transporttest.DeadLetter{ID: dl.ID, Reason: dl.Reason})
				}
				return out
			},
		}
	})
}
