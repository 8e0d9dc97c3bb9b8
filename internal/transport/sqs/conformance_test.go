package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/transporttest"
	sqstr "github.com/heraldhq/herald/internal/transport/sqs"
)

// TestConformance runs the seam suite on goaws, each subtest on queues of
// its own: events go out through a Publisher, deliveries come from
// Consumers whose visibility timeout is the suite's lease, and the dead
// letters are read from PREFIX-send-dlq.
func TestConformance(t *testing.T) {
	transporttest.Run(t, harness(config))
}

// TestConformanceFIFO runs the suite on FIFO queues (every event of the
// suite is another user's: another group).
func TestConformanceFIFO(t *testing.T) {
	transporttest.Run(t, harness(fifoConfig))
}

// harness returns the suite's harness on the queues newConfig gives.
func harness(newConfig func(*testing.T) sqstr.Config) func(*testing.T) transporttest.Harness {
	return func(t *testing.T) transporttest.Harness {
		base := newConfig(t)
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
				if sc.Lease > 0 {
					cfg.VisibilityTimeout = max(sc.Lease, time.Second)
				}
				c, err := sqstr.NewConsumer(cfg)
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
	}
}
