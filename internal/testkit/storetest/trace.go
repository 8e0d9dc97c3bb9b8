package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// testTraceparent: the trace context a create is given travels with its
// outbox event, to the relay (relay.Batch) and to the outbox table's
// workers (Claim); an event written without one has none.
func testTraceparent(t *testing.T, ctx context.Context, h Harness) {
	s := h.Store
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced, err := s.Create(ctx, notify.NewNotification{Request: request(0), Traceparent: tp})
	require.NoError(t, err)
	untraced := create(t, ctx, s, 1)

	byNotification := func(payload []byte) int64 {
		_, nid, err := notify.Message{Type: notify.EventRequested, Payload: payload}.Decode()
		require.NoError(t, err)
		return nid
	}
	evs := allEvents(t, ctx, s)
	require.Len(t, evs, 2)
	for _, e := range evs {
		switch byNotification(e.Payload) {
		case traced.Notification.ID:
			require.Equal(t, tp, e.Traceparent)
		case untraced.ID:
			require.Empty(t, e.Traceparent)
		}
	}

	ms, err := s.Claim(ctx, "w", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	for _, m := range ms {
		switch byNotification(m.Payload) {
		case traced.Notification.ID:
			require.Equal(t, tp, m.Traceparent)
		case untraced.ID:
			require.Empty(t, m.Traceparent)
		}
	}
}
