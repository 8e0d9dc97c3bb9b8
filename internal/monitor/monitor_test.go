package monitor

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

var _ Stats = (*sqlite.Store)(nil)

func TestNewRejects(t *testing.T) {
	t.Parallel()
	stats := &scripted{}
	tests := map[string]Config{
		"negative interval":  {Interval: -time.Second},
		"negative threshold": {Threshold: -1},
		"negative for":       {For: -time.Minute},
		"telegram no token":  {Telegram: &TelegramConfig{ChatID: "1"}},
		"telegram no chat":   {Telegram: &TelegramConfig{Token: "t"}},
		"telegram bad api":   {Telegram: &TelegramConfig{Token: "t", ChatID: "1", API: "ftp://x"}},
	}
	for name, cfg := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := New(stats, cfg)
			require.Error(t, err)
		})
	}
	_, err := New(nil, Config{})
	require.Error(t, err)

	m, err := New(stats, Config{})
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, m.cfg.Interval)
	require.Zero(t, m.cfg.Threshold, "a zero threshold is kept, not replaced by a default")
	require.Zero(t, m.cfg.For, "a zero For is kept, not replaced by a default")
}

// HERALD_ALERT_BACKLOG=0 asks for an alert whenever anything waits: the
// threshold 0 is kept as given, so a backlog of 1 fires once For has passed,
// and an empty outbox resolves it.
func TestZeroThresholdAlertsOnAnyBacklog(t *testing.T) {
	t.Parallel()
	stats := &scripted{}
	var logs logBuffer
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := New(stats, Config{
		Threshold: 0, For: time.Minute,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Now:    func() time.Time { return now },
	})
	require.NoError(t, err)
	ctx := context.Background()

	stats.set(1, nil)
	require.NoError(t, m.sample(ctx))
	require.Empty(t, logs.records(t, "alert firing"), "not before For has passed")
	now = now.Add(time.Minute)
	require.NoError(t, m.sample(ctx))
	firing := logs.records(t, "alert firing")
	require.Len(t, firing, 1)
	require.Equal(t, 1.0, firing[0]["value"])
	require.Equal(t, 0.0, firing[0]["threshold"])

	stats.set(0, nil)
	now = now.Add(15 * time.Second)
	require.NoError(t, m.sample(ctx))
	require.Len(t, logs.records(t, "alert resolved"), 1)
}

// For 0 fires on the first sample above the threshold.
func TestZeroForFiresOnFirstSampleAbove(t *testing.T) {
	t.Parallel()
	stats := &scripted{}
	var logs logBuffer
	m, err := New(stats, Config{Threshold: 5, For: 0, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.NoError(t, err)
	stats.set(5, nil)
	require.NoError(t, m.sample(context.Background()))
	require.Empty(t, logs.records(t, "alert firing"), "at the threshold is not above")
	stats.set(6, nil)
	require.NoError(t, m.sample(context.Background()))
	require.Len(t, logs.records(t, "alert firing"), 1)
}

// scripted is a Stats whose answer the test sets.
type scripted struct {
	mu    sync.Mutex
	value int64
	err   error
	calls atomic.Int64
}

func (s *scripted) set(value int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value, s.err = value, err
}

func (s *scripted) OutboxStats(context.Context) (notify.OutboxStats, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return notify.OutboxStats{}, s.err
	}
	return notify.OutboxStats{Unprocessed: s.value, OldestAge: time.Duration(s.value) * time.Second, DeadLetters: 7}, nil
}

// waitSamples waits until stats has answered n more calls.
func waitSamples(t *testing.T, s interface{ samples() int64 }, n int64) {
	t.Helper()
	target := s.samples() + n
	require.Eventually(t, func() bool { return s.samples() >= target }, 5*time.Second, time.Millisecond)
}

func (s *scripted) samples() int64 { return s.calls.Load() }

func TestFailedSampleKeepsAlertState(t *testing.T) {
	t.Parallel()
	stats := &scripted{}
	var logs logBuffer
	reg := prometheus.NewRegistry()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := New(stats, Config{
		Threshold: 5, For: time.Minute,
		Logger:     slog.New(slog.NewJSONHandler(&logs, nil)),
		Registerer: reg,
		Now:        func() time.Time { return now },
	})
	require.NoError(t, err)
	ctx := context.Background()
	down := errors.New("database is down")
	step := func(d time.Duration, value int64, err error) {
		now = now.Add(d)
		stats.set(value, err)
		if err != nil {
			require.ErrorIs(t, m.sample(ctx), err)
		} else {
			require.NoError(t, m.sample(ctx))
		}
	}

	step(0, 10, nil)
	step(30*time.Second, 0, down) // not a reset
	require.Equal(t, 10.0, gauge(t, reg, "herald_outbox_unprocessed"), "a failed sample keeps the last values")
	require.Equal(t, 10.0, gauge(t, reg, "herald_outbox_oldest_unprocessed_seconds"))
	require.Equal(t, 7.0, gauge(t, reg, "herald_dead_letters"))
	step(30*time.Second, 10, nil)
	require.Len(t, logs.records(t, "alert firing"), 1)

	step(time.Minute, 0, down) // not a resolution
	require.Empty(t, logs.records(t, "alert resolved"))
	step(time.Minute, 2, nil)
	require.Len(t, logs.records(t, "alert resolved"), 1)
}

func TestRunLogsOncePerFailureStreak(t *testing.T) {
	t.Parallel()
	stats := &scripted{}
	var logs logBuffer
	m, err := New(stats, Config{Interval: time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.NoError(t, err)
	stats.set(0, errors.New("database is down"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	const failed = "backlog sample failed; keeping the last values"
	waitSamples(t, stats, 10)
	require.Len(t, logs.records(t, failed), 1)
	require.Equal(t, "WARN", logs.records(t, failed)[0]["level"])

	stats.set(0, nil)
	require.Eventually(t, func() bool { return len(logs.records(t, "backlog sampling recovered")) == 1 }, 5*time.Second, time.Millisecond)
	stats.set(0, errors.New("down again"))
	require.Eventually(t, func() bool { return len(logs.records(t, failed)) == 2 }, 5*time.Second, time.Millisecond)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestTelegramFailureDoesNotStopMonitor(t *testing.T) {
	t.Parallel()
	bot := newBotServer(t, http.StatusUnauthorized)
	stats := &scripted{}
	var logs logBuffer
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := New(stats, Config{
		Threshold: 5, For: time.Minute,
		Logger:   slog.New(slog.NewJSONHandler(&logs, nil)),
		Telegram: &TelegramConfig{Token: testToken, ChatID: "1", API: bot.URL},
		Now:      func() time.Time { return now },
	})
	require.NoError(t, err)
	ctx := context.Background()

	stats.set(10, nil)
	require.NoError(t, m.sample(ctx))
	now = now.Add(time.Minute)
	require.NoError(t, m.sample(ctx))
	stats.set(0, nil)
	require.NoError(t, m.sample(ctx))

	require.Len(t, logs.records(t, "alert firing"), 1)
	require.Len(t, logs.records(t, "alert resolved"), 1)
	warns := logs.records(t, "telegram alert not sent")
	require.Len(t, warns, 2)
	require.Equal(t, "WARN", warns[0]["level"])
	require.Len(t, bot.requests(), 2)
	require.NotContains(t, logs.String(), "SECRET")
}

// counting wraps a real store to let the test wait for samples.
type counting struct {
	Stats
	calls atomic.Int64
}

func (c *counting) OutboxStats(ctx context.Context) (notify.OutboxStats, error) {
	defer c.calls.Add(1)
	return c.Stats.OutboxStats(ctx)
}

func (c *counting) samples() int64 { return c.calls.Load() }

func TestBacklogAlertSQLite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "h.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	require.NoError(t, store.Migrate(ctx))

	bot := newBotServer(t, http.StatusOK)
	var logs logBuffer
	reg := prometheus.NewRegistry()
	stats := &counting{Stats: store}
	m, err := New(stats, Config{
		Interval: 20 * time.Millisecond, Threshold: 5, For: 100 * time.Millisecond,
		Logger:     slog.New(slog.NewJSONHandler(&logs, nil)),
		Registerer: reg,
		Telegram:   &TelegramConfig{Token: testToken, ChatID: "-100", API: bot.URL},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	waitSamples(t, stats, 1)
	require.Equal(t, 0.0, gauge(t, reg, "herald_outbox_unprocessed"))

	for i := range 10 {
		_, err := store.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
			UserID: "u" + notify.FormatID(int64(i+1)), Channel: notify.ChannelEmail,
			To: "a@example.com", Subject: "s", Body: "b",
		}})
		require.NoError(t, err)
	}

	require.Eventually(t, func() bool { return len(logs.records(t, "alert firing")) > 0 }, 5*time.Second, 5*time.Millisecond)
	firing := logs.records(t, "alert firing")[0]
	require.Equal(t, "ERROR", firing["level"])
	require.Equal(t, "OutboxBacklog", firing["alert"])
	require.Equal(t, 10.0, firing["value"])
	require.Equal(t, 5.0, firing["threshold"])
	require.Equal(t, float64(100*time.Millisecond), firing["for"]) // JSONHandler writes durations in ns
	require.Equal(t, 10.0, gauge(t, reg, "herald_outbox_unprocessed"))
	require.Greater(t, gauge(t, reg, "herald_outbox_oldest_unprocessed_seconds"), 0.0)

	// Firing stays one record while the backlog stays.
	waitSamples(t, stats, 5)
	require.Len(t, logs.records(t, "alert firing"), 1)
	require.Empty(t, logs.records(t, "alert resolved"))

	relayed := 0
	for relayed < 10 {
		n, err := relay.Batch(ctx, store, 100, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
			ids := make([]int64, len(evs))
			for i, ev := range evs {
				ids[i] = ev.ID
			}
			return ids, nil
		})

		require.NoError(t, err)
		require.NotZero(t, n)
		relayed += n
	}

	require.Eventually(t, func() bool { return len(logs.records(t, "alert resolved")) > 0 }, 5*time.Second, 5*time.Millisecond)
	res := logs.records(t, "alert resolved")[0]
	require.Equal(t, "INFO", res["level"])
	require.Equal(t, "OutboxBacklog", res["alert"])
	require.Equal(t, 0.0, res["value"])
	require.Equal(t, 5.0, res["threshold"])

	waitSamples(t, stats, 3)
	require.Len(t, logs.records(t, "alert firing"), 1)
	require.Len(t, logs.records(t, "alert resolved"), 1)
	require.NotContains(t, logs.String(), testToken)

	reqs := bot.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, "/bot"+testToken+"/sendMessage", reqs[0].Path)
	require.Equal(t, "-100", reqs[0].ChatID)
	require.Equal(t, "alert firing alert=OutboxBacklog value=10 threshold=5 for=100ms", reqs[0].Text)
	require.Equal(t, "alert resolved alert=OutboxBacklog value=0 threshold=5 for=100ms", reqs[1].Text)

	require.Equal(t, 0.0, gauge(t, reg, "herald_outbox_unprocessed"))
	require.Equal(t, 0.0, gauge(t, reg, "herald_outbox_oldest_unprocessed_seconds"))
	require.Equal(t, 0.0, gauge(t, reg, "herald_dead_letters"))

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// gauge reads one unlabelled gauge from reg, the way a scrape would see it.
// (prometheus/testutil would do, but it needs a module go.sum lacks.)
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1, name)
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("gauge %s not registered", name)
	return 0
}
