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
	traced := createNew(t, ctx, s, notify.NewNotification{Request: request(0), Traceparent: tp})
	untraced := create(t, ctx, s, 1)

	// check requires the traced notification's trace context, and none
	// for the other, of one event or message.
	check := func(payload []byte, traceparent string) {
		t.Helper()
		_, nid, err := notify.Message{Type: notify.EventRequested, Payload: payload}.Decode()
		require.NoError(t, err)
		switch nid {
		case traced.ID:
			require.Equal(t, tp, traceparent)
		case untraced.ID:
			require.Empty(t, traceparent)
		}
	}
	evs := allEvents(t, ctx, s)
	require.Len(t, evs, 2)
	for _, e := range evs {
		check(e.Payload, e.Traceparent)
	}

	ms, err := s.Claim(ctx, "w", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	for _, m := range ms {
		check(m.Payload, m.Traceparent)
	}
}
