package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
)

// eachSink answers each event with answer(id) and records what it tried.
type eachSink struct {
	mu     sync.Mutex
	answer func(id int64) error
	tried  []int64
}

func (s *eachSink) PublishEach(_ context.Context, evs []notify.Event) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(evs))
	for i, e := range evs {
		s.tried = append(s.tried, e.ID)
		errs[i] = s.answer(e.ID)
	}
	return errs
}

func parkedIDs(err error) []int64 {
	var p *relay.ParkedError
	if errors.As(err, &p) {
		return p.IDs
	}
	return nil
}

// An outage of the sink (nothing reached it) spends no attempt and parks
// nothing: it is returned as an error for the relay to back off on, and
// the event goes once the sink is back, even with no retries allowed.
func TestRetrierOutageSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	down := true
	sink := &eachSink{answer: func(int64) error {
		if down {
			return notify.SenderDown(errors.New("connection refused"))
		}
		return nil
	}}
	r, err := relay.NewRetrier(sink, relay.RetryConfig{MaxRetries: 0, Delays: []time.Duration{time.Hour}})
	require.NoError(t, err)
	for range 5 {
		confirmed, err := r.Publish(t.Context(), batch(1, 2))
		require.Empty(t, confirmed)
		require.ErrorContains(t, err, "connection refused")
		require.Empty(t, parkedIDs(err), "an outage parks nothing")
	}
	down = false
	confirmed, err := r.Publish(t.Context(), batch(1, 2))
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, confirmed)
}

// At most Capacity events wait for a retry: beyond it, new events are not
// tried (no attempt spent), and that is an error the relay backs off on,
// not a parking that would make it claim ever more rows.
func TestRetrierCapacity(t *testing.T) {
	t.Parallel()
	sink := &eachSink{answer: func(int64) error { return errors.New("status 500") }}
	r, err := relay.NewRetrier(sink, relay.RetryConfig{MaxRetries: 3, Delays: []time.Duration{time.Hour}, Capacity: 2})
	require.NoError(t, err)
	confirmed, err := r.Publish(t.Context(), batch(1, 2, 3, 4))
	require.Empty(t, confirmed)
	require.Equal(t, []int64{1, 2}, sink.tried)
	require.ElementsMatch(t, []int64{1, 2}, parkedIDs(err))
	require.ErrorContains(t, err, "2 events not tried")

	// Parked events are not offered to the sink before their due time.
	_, err = r.Publish(t.Context(), batch(1, 2, 3))
	require.Equal(t, []int64{1, 2}, sink.tried)
	require.ElementsMatch(t, []int64{1, 2}, parkedIDs(err))
}

func TestRetryConfigValidate(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]relay.RetryConfig{
		"negative retries":  {MaxRetries: -1},
		"negative delay":    {Delays: []time.Duration{-time.Second}},
		"negative capacity": {Capacity: -1},
	} {
		_, err := relay.NewRetrier(&eachSink{}, cfg)
		require.Error(t, err, name)
	}
}

// A sink that answers 503 to everything and has accepted nothing within
// the retry delay is down for maintenance: its refusals spend no attempt
// (no dead letter even with no retries allowed), the events are tried
// again within seconds, and go once it is back. Once it accepts events
// again, a refusal is the event's own attempt.
func TestRetrierSinkRefusingEverythingSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	failing := true
	sink := &eachSink{answer: func(id int64) error {
		mu.Lock()
		defer mu.Unlock()
		if failing || id == 9 {
			return errors.New("status 503: down for maintenance")
		}
		return nil
	}}
	r, err := relay.NewRetrier(sink, relay.RetryConfig{MaxRetries: 0, Delays: []time.Duration{time.Hour}})
	require.NoError(t, err)
	confirmed, err := r.Publish(t.Context(), batch(1, 2))
	require.Empty(t, confirmed, "dead-lettered during the sink's outage")
	require.ElementsMatch(t, []int64{1, 2}, parkedIDs(err))

	mu.Lock()
	failing = false
	mu.Unlock()
	var got []int64
	require.Eventually(t, func() bool {
		c, _ := r.Publish(t.Context(), batch(1, 2))
		got = append(got, c...)
		return len(got) == 2
	}, 10*time.Second, 50*time.Millisecond, "the events never went after the outage")

	// Up again: event 9's refusal is its own, and with no retries
	// allowed it is dead-lettered (confirmed: given up on).
	confirmed, err = r.Publish(t.Context(), batch(9))
	require.NoError(t, err)
	require.Equal(t, []int64{9}, confirmed)
}
