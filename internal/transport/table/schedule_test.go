package table_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/table"
)

// A retry list schedules each retry in turn, the last delay repeating: with
// 1s,2s,4s the gaps between the attempts of one failing row are 1s, 2s, 4s,
// 4s.
func TestRetryScheduleFollowsList(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) queueStore{
		"sqlite": func(t *testing.T) queueStore {
			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			require.NoError(t, s.Migrate(t.Context()))
			return s
		},
		"postgres": func(t *testing.T) queueStore {
			url := pgtest.URL(t)
			s, err := postgres.Open(t.Context(), url, postgres.Config{MaxConns: 4})
			require.NoError(t, err)
			t.Cleanup(s.Close)
			require.NoError(t, s.Migrate(t.Context()))
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			_, err := s.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
				UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b",
			}})
			require.NoError(t, err)

			delays := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
			want := append(delays, 4*time.Second) // the last one repeats
			tr, err := table.New(s, s, table.Config{RetryDelays: delays, PollInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
			defer cancel()
			var (
				mu       sync.Mutex
				attempts []time.Time
				retries  []int
			)
			require.NoError(t, tr.Consume(ctx, func(ctx context.Context, d notify.Delivery) {
				mu.Lock()
				attempts = append(attempts, time.Now())
				retries = append(retries, d.Message().RetryCount)
				n := len(attempts)
				mu.Unlock()
				if n <= len(want) {
					assert.NoError(t, d.Retry(ctx, "451 try later"))
					return
				}
				assert.NoError(t, d.Ack(ctx))
				cancel()
			}))
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, attempts, len(want)+1, "attempts within the test's 40 seconds")
			require.Equal(t, []int{0, 1, 2, 3, 4}, retries)
			for i, d := range want {
				gap := attempts[i+1].Sub(attempts[i])
				t.Logf("retry %d: %s after the attempt before (schedule %s)", i+1, gap.Round(time.Millisecond), d)
				require.GreaterOrEqual(t, testenv.Waited(attempts[i], attempts[i+1]), testenv.NotBefore(d), "retry %d came early", i+1)
				require.Less(t, gap, d+3*time.Second, "retry %d came late", i+1)
			}
		})
	}
}

func TestRetryDelaysValidated(t *testing.T) {
	t.Parallel()
	_, err := table.New(nil, nil, table.Config{RetryDelays: []time.Duration{time.Second, -time.Second}})
	require.ErrorContains(t, err, "negative")
}
