package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testlog"
	"github.com/heraldhq/herald/internal/worker"
)

// A delivery whose handler context ends while it waits for a send slot
// (the worker stopping, its grace over) is handed back: logged at DEBUG as
// a hand-back, never at ERROR, where it read "delivery not settled ...
// context canceled" on every ordinary SIGTERM (issue 38).
func TestShutdownHandBackIsNoError(t *testing.T) {
	t.Parallel()
	logs := &testlog.Buffer{}
	snd := &enteringSender{entered: make(chan struct{})}
	w := newWorker(t, &fakeStore{}, snd, worker.Config{
		Sends: 1, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	// The one send slot is held by a send that hangs until its context ends.
	sendCtx, stopSend := context.WithCancel(context.Background())
	sending := &fakeDelivery{msg: message(t, 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Handle(sendCtx, sending)
	}()
	<-snd.entered // the first send holds the slot

	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	waiting := &fakeDelivery{msg: message(t, 0)}
	waiting.msg.ID = 71
	w.Handle(stopped, waiting)
	require.Equal(t, []string{"release"}, waiting.hows(), "handed back")
	require.Contains(t, logs.String(), `level=DEBUG msg="delivery handed back: shutting down" message_id=71`)
	require.NotContains(t, logs.String(), "level=ERROR")

	stopSend()
	<-done
	require.NotContains(t, logs.String(), "level=ERROR", "a send cut short by the stop is handed back too")
}

// enteringSender hangs as hangingSender does, and says when a send began.
type enteringSender struct {
	hangingSender
	entered chan struct{}
}

func (s *enteringSender) Send(ctx context.Context, e notify.Outgoing) error {
	close(s.entered)
	return s.hangingSender.Send(ctx, e)
}

// A send whose outcome the store would not take until the stop's grace was
// over stays an ERROR: its redelivery repeats the send.
func TestUnrecordedAtStopIsAnError(t *testing.T) {
	t.Parallel()
	logs := &testlog.Buffer{}
	store := &fakeStore{recordErr: errors.New("connection refused")}
	ctx, cancel := context.WithCancel(context.Background())
	w := newWorker(t, store, &cancelingSender{cancel: cancel}, worker.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	d := &fakeDelivery{msg: message(t, 0)}
	w.Handle(ctx, d)
	require.Equal(t, []string{"release"}, d.hows())
	require.Contains(t, logs.String(), `level=ERROR msg="delivery not settled; it will come back"`)
	require.Contains(t, logs.String(), "outcome not recorded")
}
