package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
)

// sink confirms the events whose ids ok accepts and records what it got.
type sink struct {
	ok  func(id int64) bool
	err error
	got [][]int64
}

func (s *sink) Publish(_ context.Context, evs []notify.Event) ([]int64, error) {
	var got, out []int64
	for _, e := range evs {
		got = append(got, e.ID)
		if s.ok(e.ID) {
			out = append(out, e.ID)
		}
	}
	s.got = append(s.got, got)
	if len(out) < len(evs) {
		return out, s.err
	}
	return out, nil
}

func batch(ids ...int64) []notify.Event {
	evs := make([]notify.Event, len(ids))
	for i, id := range ids {
		evs[i] = notify.Event{ID: id, Type: notify.EventSent}
	}
	return evs
}

// An event is confirmed once every sink has confirmed it; the next batch
// offers it only to the sinks that have not.
func TestFanOutConfirmsWhatEverySinkConfirmed(t *testing.T) {
	t.Parallel()
	down := true
	broker := &sink{ok: func(int64) bool { return true }}
	hook := &sink{ok: func(id int64) bool { return !down || id == 2 }, err: errors.New("503")}
	f, err := relay.NewFanOut(broker, hook)
	require.NoError(t, err)

	confirmed, err := f.Publish(t.Context(), batch(1, 2, 3))
	require.ErrorContains(t, err, "503")
	require.Equal(t, []int64{2}, confirmed)

	down = false
	confirmed, err = f.Publish(t.Context(), batch(1, 3, 4))
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3, 4}, confirmed)
	require.Equal(t, [][]int64{{1, 2, 3}, {4}}, broker.got, "the broker got 1 and 3 once")
	require.Equal(t, [][]int64{{1, 2, 3}, {1, 3, 4}}, hook.got)
}

// A sink's permanent error stays visible (the relay stops on it); an
// outage does not.
func TestFanOutKeepsPermanent(t *testing.T) {
	t.Parallel()
	bad := &sink{ok: func(int64) bool { return false }, err: notify.Permanent(errors.New("406 PRECONDITION_FAILED"))}
	good := &sink{ok: func(int64) bool { return true }}
	f, err := relay.NewFanOut(good, bad)
	require.NoError(t, err)
	confirmed, err := f.Publish(t.Context(), batch(1))
	require.Empty(t, confirmed)
	require.True(t, notify.IsPermanent(err))

	_, err = relay.NewFanOut()
	require.Error(t, err)
}

func TestConfirmAll(t *testing.T) {
	t.Parallel()
	confirmed, err := relay.ConfirmAll{}.Publish(t.Context(), batch(5, 6))
	require.NoError(t, err)
	require.Equal(t, []int64{5, 6}, confirmed)
}

// typedSource records the type selection it was asked for.
type typedSource struct{ types [][]string }

func (s *typedSource) LeaseRelay(_ context.Context, _ int, types []string, _ string, _ time.Duration) ([]notify.Event, error) {
	s.types = append(s.types, types)
	return nil, nil
}

func (s *typedSource) SettleRelay(context.Context, []notify.OutboxKey, []notify.OutboxKey, string) error {
	return nil
}

func TestRelayPassesTypes(t *testing.T) {
	t.Parallel()
	src := &typedSource{}
	r, err := relay.New(src, relay.ConfirmAll{}, nil, relay.Config{Types: notify.StatusEventTypes})
	require.NoError(t, err)
	_, err = r.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, [][]string{notify.StatusEventTypes}, src.types)

	_, err = relay.New(src, relay.ConfirmAll{}, nil, relay.Config{Types: []string{}})
	require.Error(t, err, "an empty type list would relay nothing")
}

// Two relays of one process (the notifications' and the status events')
// register their metrics side by side, told apart by the relay label.
func TestTwoRelaysOneRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, err := relay.New(&typedSource{}, relay.ConfirmAll{}, nil, relay.Config{Registerer: reg})
	require.NoError(t, err)
	_, err = relay.New(&typedSource{}, relay.ConfirmAll{}, nil, relay.Config{Registerer: reg, Name: "status", Types: notify.StatusEventTypes})
	require.NoError(t, err)
	n, err := testutil.GatherAndCount(reg, "herald_relay_published_total")
	require.NoError(t, err)
	require.Equal(t, 2, n)
}
