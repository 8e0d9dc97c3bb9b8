package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/transporttest"
	"github.com/heraldhq/herald/internal/transport/kafka"
)

// TestConformance runs the seam suite, each subtest on a three-broker
// cluster of its own: events go out through a Publisher, deliveries come
// from Consumers of one group, and the dead letters are read from the
// dead-letter topic.
func TestConformance(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		c := newCluster(t, 3)
		base := c.config("")
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
				src, err := kafka.NewConsumer(cfg)
				require.NoError(t, err)
				return src
			},
			DeadLetters: func(t *testing.T) []transporttest.DeadLetter {
				t.Helper()
				var out []transporttest.DeadLetter
				for _, r := range readTopic(t, base, base.Topics().DeadLetters) {
					id, ok := notify.ParseID(header(r, kafka.HeaderMessageID))
					require.True(t, ok, "dead letter without a message id")
					out = append(out, transporttest.DeadLetter{ID: id, Reason: header(r, kafka.HeaderLastError)})
				}
				return out
			},
		}
	})
}
