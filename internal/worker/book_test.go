package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// flakyBook records the destination reports written; DestinationUp fails
// while failUp is above zero (one failure per call).
type flakyBook struct {
	mu      sync.Mutex
	failing map[string]bool
	ups     int
	failUp  int
}

func (b *flakyBook) DestinationFailing(_ context.Context, channel, key, reason string, at time.Time) (notify.Destination, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failing[key] = true
	return notify.Destination{Key: key, Channel: channel, State: notify.DestinationFailing, Reason: reason, Since: at}, nil
}

func (b *flakyBook) DestinationUp(_ context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ups++
	if b.failUp > 0 {
		b.failUp--
		return errors.New("store unavailable")
	}
	delete(b.failing, key)
	return nil
}

func (b *flakyBook) DisableDestination(context.Context, string, string) (bool, error) {
	return false, nil
}

func (b *flakyBook) DisabledDestinations(context.Context) ([]string, error) { return nil, nil }

func (b *flakyBook) isFailing(key string) (bool, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failing[key], b.ups
}

// A record another process left failing (it was killed before it saw the
// destination come back) goes at this process's first success to the
// destination, though this process's gate never saw it fail; later
// successes write nothing.
func TestBookFirstSuccessClearsLeftoverRecord(t *testing.T) {
	store := &flakyBook{failing: map[string]bool{"https://a.example": true}}
	b := newDestBook(store, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	d := &destGates{channel: "webhook", book: b}
	d.report("https://a.example", false, nil, time.Now())
	b.flush(t.Context())
	failing, ups := store.isFailing("https://a.example")
	require.False(t, failing, "the leftover failing record is removed")
	require.Equal(t, 1, ups)

	for range 3 {
		d.report("https://a.example", false, nil, time.Now())
	}
	b.flush(t.Context())
	_, ups = store.isFailing("https://a.example")
	require.Equal(t, 1, ups, "one up per destination and process")
}

// An up report that could not be written is written at the next flush,
// unless a newer report of the destination came meanwhile.
func TestBookRetriesUnwrittenReport(t *testing.T) {
	store := &flakyBook{failing: map[string]bool{"k": true, "j": true}, failUp: 2}
	b := newDestBook(store, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.up("k")
	b.up("j")
	b.flush(t.Context()) // both fail
	failing, _ := store.isFailing("k")
	require.True(t, failing)
	b.failing("webhook", "j", "down again") // newer than j's lost up
	b.flush(t.Context())
	failing, _ = store.isFailing("k")
	require.False(t, failing, "the lost up written at the next flush")
	failing, _ = store.isFailing("j")
	require.True(t, failing, "the newer report of j won over its lost up")
}
