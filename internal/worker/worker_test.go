package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/worker"
)

// The fakes below stand in for the seams so that the worker's decision
// table (ack, retry, dead-letter, release) can be checked as pure logic; the
// end-to-end suite (pipelinetest) proves the same against the real parts.

type settle struct {
	how    string // ack, retry, dead, release
	reason string
}

type fakeDelivery struct {
	msg     notify.Message
	settled []settle
}

func (d *fakeDelivery) Message() notify.Message { return d.msg }
func (d *fakeDelivery) Ack(context.Context) error {
	d.settled = append(d.settled, settle{how: "ack"})
	return nil
}
func (d *fakeDelivery) Retry(_ context.Context, reason string) error {
	d.settled = append(d.settled, settle{"retry", reason})
	return nil
}
func (d *fakeDelivery) DeadLetter(_ context.Context, reason string) error {
	d.settled = append(d.settled, settle{"dead", reason})
	return nil
}
func (d *fakeDelivery) Release(context.Context) error {
	d.settled = append(d.settled, settle{how: "release"})
	return nil
}

type failure struct {
	reason string
	dead   bool
}

type fakeStore struct {
	deliverErr error // returned before send is called
	duplicate  bool
	recordErr  error
	failures   []failure
}

func (s *fakeStore) Deliver(ctx context.Context, _, _ int64, send func(context.Context) error) (notify.Outcome, error) {
	if s.deliverErr != nil {
		return "", s.deliverErr
	}
	if s.duplicate {
		return notify.OutcomeDuplicate, nil
	}
	if err := send(ctx); err != nil {
		return "", err
	}
	return notify.OutcomeSent, nil
}

func (s *fakeStore) RecordFailure(_ context.Context, _, _ int64, reason string, dead bool) error {
	if s.recordErr != nil {
		return s.recordErr
	}
	s.failures = append(s.failures, failure{reason, dead})
	return nil
}

type fakeSender struct {
	err  error
	sent []notify.Email
}

func (s *fakeSender) Send(_ context.Context, e notify.Email) error {
	s.sent = append(s.sent, e)
	return s.err
}

func message(t *testing.T, retries int) notify.Message {
	t.Helper()
	payload, err := json.Marshal(notify.Requested{NotificationID: "7", UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b"})
	require.NoError(t, err)
	return notify.Message{ID: 70, Type: notify.EventRequested, Payload: payload, RetryCount: retries}
}

func TestHandleDecisions(t *testing.T) {
	t.Parallel()
	transient := errors.New("451 try later")
	permanent := notify.Permanent(errors.New("550 no such mailbox"))
	tests := []struct {
		name     string
		msg      func(t *testing.T) notify.Message
		store    fakeStore
		sendErr  error
		settled  []string
		failures []failure
		sends    int
	}{
		{name: "sent", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			settled: []string{"ack"}, sends: 1},
		{name: "duplicate", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{duplicate: true}, settled: []string{"ack"}},
		{name: "transient failure is retried", msg: func(t *testing.T) notify.Message { return message(t, 1) },
			sendErr: transient, settled: []string{"retry"}, failures: []failure{{"451 try later", false}}, sends: 1},
		{name: "the last retry fails: dead letter", msg: func(t *testing.T) notify.Message { return message(t, 2) },
			sendErr: transient, settled: []string{"dead"}, failures: []failure{{"451 try later", true}}, sends: 1},
		{name: "permanent failure: dead at once", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			sendErr: permanent, settled: []string{"dead"}, failures: []failure{{"550 no such mailbox", true}}, sends: 1},
		{name: "undecodable: dead, nothing recorded", msg: func(*testing.T) notify.Message {
			return notify.Message{ID: 71, Type: notify.EventRequested, Payload: []byte("{")}
		}, settled: []string{"dead"}},
		{name: "store down before the send: released, no retry spent", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{deliverErr: errors.New("connection refused")}, settled: []string{"release"}},
		{name: "missing notification: dead", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{deliverErr: notify.Permanent(notify.ErrNotFound)}, settled: []string{"dead"}, failures: []failure{{"not found", true}}},
		{name: "failure not recorded: released", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{recordErr: errors.New("connection refused")}, sendErr: transient, settled: []string{"release"}, sends: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := tt.store
			snd := &fakeSender{err: tt.sendErr}
			reg := prometheus.NewRegistry()
			w, err := worker.New(nil, &store, snd, worker.Config{
				From: "herald@example.com", MaxRetries: 2, StoreBackoff: time.Millisecond, Registerer: reg,
			})
			require.NoError(t, err)
			d := &fakeDelivery{msg: tt.msg(t)}
			w.Handle(context.Background(), d)

			var got []string
			for _, s := range d.settled {
				got = append(got, s.how)
			}
			require.Equal(t, tt.settled, got)
			require.Equal(t, tt.failures, store.failures)
			require.Len(t, snd.sent, tt.sends)
			for _, e := range snd.sent {
				require.Equal(t, "<7@example.com>", e.MessageID)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := worker.New(nil, &fakeStore{}, &fakeSender{}, worker.Config{From: "not an address"})
	require.Error(t, err)
	_, err = worker.New(nil, &fakeStore{}, &fakeSender{}, worker.Config{MaxRetries: -1})
	require.Error(t, err)
	_, err = worker.New(nil, &fakeStore{}, &fakeSender{}, worker.Config{StoreBackoff: -time.Second})
	require.Error(t, err)
}

// MaxRetries zero means no retries, not a default: the first failure is
// dead-lettered.
func TestZeroRetriesDeadLettersTheFirstFailure(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	w, err := worker.New(nil, store, &fakeSender{err: errors.New("451 try later")}, worker.Config{
		From: "herald@example.com", StoreBackoff: time.Millisecond,
	})
	require.NoError(t, err)
	d := &fakeDelivery{msg: message(t, 0)}
	w.Handle(context.Background(), d)
	require.Equal(t, []settle{{"dead", "451 try later"}}, d.settled)
	require.Equal(t, []failure{{"451 try later", true}}, store.failures)
}
