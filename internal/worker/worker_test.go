package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testlog"
	"github.com/heraldhq/herald/internal/worker"
)

// The fakes below stand in for the seams so that the worker's decision
// table (ack, retry, dead-letter, release) can be checked as pure logic; the
// store conformance suite proves the claims and records against the real
// stores, and the end-to-end suite (pipelinetest) the whole against the real
// parts.

type settle struct {
	how    string // ack, retry, dead, release
	reason string
	after  time.Duration // a release's
}

type fakeDelivery struct {
	mu       sync.Mutex
	msg      notify.Message
	settled  []settle
	retryErr error
	// retryFails, when set, makes only the first retryFails Retry calls
	// fail with retryErr; onRetryFail runs after each failed one.
	retryFails  int
	retryCalls  int
	onRetryFail func(calls int)
	deadErr     error
}

func (d *fakeDelivery) add(s settle) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.settled = append(d.settled, s)
}

func (d *fakeDelivery) hows() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, s := range d.settled {
		out = append(out, s.how)
	}
	return out
}

func (d *fakeDelivery) Message() notify.Message { return d.msg }
func (d *fakeDelivery) Ack(context.Context) error {
	d.add(settle{how: "ack"})
	return nil
}
func (d *fakeDelivery) Retry(_ context.Context, reason string) error {
	d.mu.Lock()
	d.retryCalls++
	calls := d.retryCalls
	d.mu.Unlock()
	if d.retryErr != nil && (d.retryFails == 0 || calls <= d.retryFails) {
		if d.onRetryFail != nil {
			d.onRetryFail(calls)
		}
		return d.retryErr
	}
	d.add(settle{how: "retry", reason: reason})
	return nil
}
func (d *fakeDelivery) DeadLetter(_ context.Context, reason string) error {
	if d.deadErr != nil {
		return d.deadErr
	}
	d.add(settle{how: "dead", reason: reason})
	return nil
}
func (d *fakeDelivery) Release(_ context.Context, after time.Duration) error {
	d.add(settle{how: "release", after: after})
	return nil
}

// fakeStore answers every claim with status and keeps the records.
type fakeStore struct {
	mu        sync.Mutex
	status    notify.ClaimStatus // default ClaimTaken
	claimErr  error
	recordErr error
	// recordFails, when set, makes only the first recordFails records fail
	// with recordErr.
	recordFails int
	lost        bool // records report the claim lost
	claims      [][]notify.ClaimRequest
	records     []notify.DeliveryResult
	// failedRecords are the results of the failed record calls.
	failedRecords []notify.DeliveryResult
}

func (s *fakeStore) ClaimDeliveries(_ context.Context, reqs []notify.ClaimRequest, lease time.Duration) ([]notify.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimErr != nil {
		return nil, s.claimErr
	}
	s.claims = append(s.claims, reqs)
	status := s.status
	if status == "" {
		status = notify.ClaimTaken
	}
	out := make([]notify.Claim, len(reqs))
	for i, r := range reqs {
		out[i] = notify.Claim{MessageID: r.MessageID, NotificationID: r.NotificationID, Status: status}
		if status == notify.ClaimTaken {
			out[i].AttemptID = r.MessageID * 10
			out[i].Until = time.Now().Add(lease)
		}
	}
	return out, nil
}

func (s *fakeStore) RecordDeliveries(_ context.Context, rs []notify.DeliveryResult) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recordErr != nil && (s.recordFails == 0 || len(s.failedRecords) < s.recordFails) {
		s.failedRecords = append(s.failedRecords, rs...)
		return nil, s.recordErr
	}
	s.records = append(s.records, rs...)
	out := make([]bool, len(rs))
	for i := range out {
		out[i] = !s.lost
	}
	return out, nil
}

type rec struct{ outcome, reason string }

func (s *fakeStore) recs() []rec {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []rec
	for _, r := range s.records {
		out = append(out, rec{r.Outcome, r.Error})
	}
	return out
}

type fakeSender struct {
	mu   sync.Mutex
	err  error
	sent []notify.Outgoing
}

func (s *fakeSender) Send(_ context.Context, e notify.Outgoing) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, e)
	return s.err
}

func (s *fakeSender) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *fakeSender) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sent)
}

func payload(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal(notify.Requested{NotificationID: "7", UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b"})
	require.NoError(t, err)
	return b
}

func message(t *testing.T, retries int) notify.Message {
	t.Helper()
	return notify.Message{ID: 70, Type: notify.EventRequested, Payload: payload(t), RetryCount: retries}
}

func newWorker(t *testing.T, store worker.Bookkeeper, snd worker.Sender, cfg worker.Config) *worker.Worker {
	t.Helper()
	return newWorkerOn(t, store, worker.Channel{Sender: snd, Provider: "mail server"}, cfg)
}

// newWorkerOn returns a worker whose email channel is ch.
func newWorkerOn(t *testing.T, store worker.Bookkeeper, ch worker.Channel, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.StoreBackoff == 0 {
		cfg.StoreBackoff = time.Millisecond
	}
	w, err := worker.New(nil, store, map[string]worker.Channel{notify.ChannelEmail: ch}, cfg)
	require.NoError(t, err)
	return w
}

// email is the email channel on snd with ch's limits.
func email(snd worker.Sender, ch worker.Channel) map[string]worker.Channel {
	ch.Sender = snd
	return map[string]worker.Channel{notify.ChannelEmail: ch}
}

func TestHandleDecisions(t *testing.T) {
	t.Parallel()
	transient := errors.New("451 try later")
	permanent := notify.Permanent(errors.New("550 no such mailbox"))
	down := notify.SenderDown(errors.New("dial: connection refused"))
	tests := []struct {
		name    string
		msg     func(t *testing.T) notify.Message
		store   fakeStore
		sendErr error
		dlvry   fakeDelivery
		settled []string
		records []rec
		sends   int
	}{
		{name: "sent", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			settled: []string{"ack"}, records: []rec{{"sent", ""}}, sends: 1},
		{name: "duplicate", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{status: notify.ClaimDuplicate}, settled: []string{"ack"}},
		{name: "busy: handed back, nothing sent", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{status: notify.ClaimBusy}, settled: []string{"release"}},
		{name: "transient failure is retried", msg: func(t *testing.T) notify.Message { return message(t, 1) },
			sendErr: transient, settled: []string{"retry"}, records: []rec{{"retry", "451 try later"}}, sends: 1},
		{name: "the last retry fails: dead letter", msg: func(t *testing.T) notify.Message { return message(t, 2) },
			sendErr: transient, settled: []string{"dead"}, records: []rec{{"dead", "451 try later"}}, sends: 1},
		{name: "permanent failure: dead at once", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			sendErr: permanent, settled: []string{"dead"}, records: []rec{{"dead", "550 no such mailbox"}}, sends: 1},
		{name: "sender down: deferred, released, no retry", msg: func(t *testing.T) notify.Message { return message(t, 2) },
			sendErr: down, settled: []string{"release"}, records: []rec{{"deferred", "dial: connection refused"}}, sends: 1},
		{name: "undecodable, names nothing: dead, nothing recorded", msg: func(*testing.T) notify.Message {
			return notify.Message{ID: 71, Type: notify.EventRequested, Payload: []byte("{")}
		}, settled: []string{"dead"}},
		{name: "store down before the send: released, no retry spent", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{claimErr: errors.New("connection refused")}, settled: []string{"release"}},
		{name: "missing notification: dead", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{status: notify.ClaimMissing}, settled: []string{"dead"}},
		// Issue 16, defect 4: a record that fails is retried until it
		// commits, for every outcome; the delivery is not handed back.
		{name: "failed record of a send retried", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{recordErr: errors.New("connection refused"), recordFails: 2}, settled: []string{"ack"},
			records: []rec{{"sent", ""}}, sends: 1},
		{name: "failed record of a failure retried", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{recordErr: errors.New("connection refused"), recordFails: 1}, sendErr: transient,
			settled: []string{"retry"}, records: []rec{{"retry", "451 try later"}}, sends: 1},
		{name: "failed record of a dead letter retried", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{recordErr: errors.New("connection refused"), recordFails: 1}, sendErr: permanent,
			settled: []string{"dead"}, records: []rec{{"dead", "550 no such mailbox"}}, sends: 1},
		{name: "failed record of a deferral retried", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{recordErr: errors.New("connection refused"), recordFails: 1}, sendErr: down,
			settled: []string{"release"}, records: []rec{{"deferred", "dial: connection refused"}}, sends: 1},
		{name: "claim lost during the send: acked, no retry", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			store: fakeStore{lost: true}, sendErr: transient, settled: []string{"ack"}, records: []rec{{"retry", "451 try later"}}, sends: 1},
		// A retry recorded makes the store refuse the original as a stale
		// copy: a failed forward of the retry copy is tried again until it
		// is published, not handed back (a stopping worker hands it back:
		// TestRetryPublishGivenUpOnlyWhenStopping).
		{name: "retry publish fails: tried again until published", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			sendErr: transient, dlvry: fakeDelivery{retryErr: errors.New("channel closed"), retryFails: 3},
			settled: []string{"retry"}, records: []rec{{"retry", "451 try later"}}, sends: 1},
		{name: "dead-letter publish fails: released", msg: func(t *testing.T) notify.Message { return message(t, 0) },
			sendErr: permanent, dlvry: fakeDelivery{deadErr: errors.New("channel closed")},
			settled: []string{"release"}, records: []rec{{"dead", "550 no such mailbox"}}, sends: 1},
		{name: "undecodable dead-letter publish fails: released", msg: func(*testing.T) notify.Message {
			return notify.Message{ID: 71, Type: "other"}
		}, dlvry: fakeDelivery{deadErr: errors.New("channel closed")}, settled: []string{"release"}},
	}
	for i := range tests {
		tt := &tests[i]
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := &tt.store
			snd := &fakeSender{err: tt.sendErr}
			w := newWorker(t, store, snd, worker.Config{MaxRetries: 2, Registerer: prometheus.NewRegistry()})
			d := &tt.dlvry
			d.msg = tt.msg(t)
			w.Handle(context.Background(), d)

			require.Equal(t, tt.settled, d.hows())
			require.Equal(t, tt.records, store.recs())
			require.Len(t, snd.sent, tt.sends)
			for _, e := range snd.sent {
				require.Equal(t, "7", e.NotificationID)
				require.Equal(t, "a@example.com", e.To)
			}
		})
	}
}

// Issue 11, defect 6: a payload that fails to decode but names its
// notification fails that notification with the reason (a claim, then a
// dead record), and the message goes to the dead letters; nothing is sent.
func TestUndecodableNamingItsNotificationFailsIt(t *testing.T) {
	t.Parallel()
	for name, p := range map[string][]byte{
		"cut short":      []byte(`{"notification_id":"7","user_id":"u","to":`),
		"unknown field":  []byte(`{"notification_id":"7","user_id":"u","channel":"email","to":"a@example.com","subject":"s","body":"b","x":1}`),
		"invalid fields": []byte(`{"notification_id":"7","user_id":"u","channel":"pigeon","to":"","subject":"s","body":"b"}`),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &fakeStore{}
			snd := &fakeSender{}
			w := newWorker(t, store, snd, worker.Config{})
			d := &fakeDelivery{msg: notify.Message{ID: 9, Type: notify.EventRequested, Payload: p}}
			w.Handle(context.Background(), d)
			require.Equal(t, []string{"dead"}, d.hows())
			require.Equal(t, [][]notify.ClaimRequest{{{MessageID: 9, NotificationID: 7}}}, store.claims)
			recs := store.recs()
			require.Len(t, recs, 1)
			require.Equal(t, notify.AttemptDead, recs[0].outcome)
			require.Contains(t, recs[0].reason, "payload")
			require.Zero(t, snd.count())
		})
	}
	// A notification settled by another message stays as it is; the
	// poison still goes to the dead letters.
	store := &fakeStore{status: notify.ClaimDuplicate}
	w := newWorker(t, store, &fakeSender{}, worker.Config{})
	d := &fakeDelivery{msg: notify.Message{ID: 9, Type: notify.EventRequested, Payload: []byte(`{"notification_id":"7"`)}}
	w.Handle(context.Background(), d)
	require.Equal(t, []string{"dead"}, d.hows())
	require.Empty(t, store.recs())
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	type both struct {
		ch  worker.Channel
		cfg worker.Config
	}
	for _, c := range []both{
		{cfg: worker.Config{MaxRetries: -1}},
		{cfg: worker.Config{StoreBackoff: -time.Second}},
		{cfg: worker.Config{Sends: -1}},
		{worker.Channel{SendTimeout: 10 * time.Second}, worker.Config{Lease: 10 * time.Second}},
		{worker.Channel{SendTimeout: 10 * time.Second}, worker.Config{Lease: 5 * time.Second}},
		{cfg: worker.Config{SenderBackoff: time.Minute, SenderBackoffMax: time.Second}},
		// The lease must cover the claim's and the record's transactions
		// (10s each) besides the send.
		{worker.Channel{SendTimeout: 10 * time.Second}, worker.Config{Lease: 30 * time.Second}},
		{ch: worker.Channel{Rate: -1}},
		{ch: worker.Channel{Rate: math.NaN()}},
		{ch: worker.Channel{Rate: math.Inf(1)}},
		{ch: worker.Channel{Concurrency: -1}},
		{ch: worker.Channel{SendTimeout: -1}},
	} {
		_, err := worker.New(nil, &fakeStore{}, email(&fakeSender{}, c.ch), c.cfg)
		require.Error(t, err, "%+v", c)
	}
	for _, c := range []both{
		{ch: worker.Channel{SendTimeout: time.Minute}},
		{worker.Channel{SendTimeout: 10 * time.Second}, worker.Config{Lease: 30*time.Second + time.Millisecond}},
		{ch: worker.Channel{Rate: 0.1, Concurrency: 6}}, // 0.1/s lets 6 through in the default 60s hold
		{ch: worker.Channel{Rate: 0.5}},                 // no concurrency of its own: not checked
	} {
		_, err := worker.New(nil, &fakeStore{}, email(&fakeSender{}, c.ch), c.cfg)
		require.NoError(t, err, "%+v", c)
	}
	_, err := worker.New(nil, &fakeStore{}, nil, worker.Config{})
	require.Error(t, err, "no channel")
	_, err = worker.New(nil, &fakeStore{}, map[string]worker.Channel{"email": {}}, worker.Config{})
	require.Error(t, err, "no sender")
	// One lease serves every channel: it must cover the longest timeout.
	_, err = worker.New(nil, &fakeStore{}, map[string]worker.Channel{
		"email":   {Sender: &fakeSender{}, SendTimeout: time.Second},
		"webhook": {Sender: &fakeSender{}, SendTimeout: 40 * time.Second},
	}, worker.Config{Lease: worker.DefaultLease(time.Second)})
	require.ErrorContains(t, err, "send timeout (40s)")
}

// Issue 16, defect 5: the default lease covers the holder's worst path:
// the claim's transaction, the send, the record's transaction and a
// margin.
func TestDefaultLease(t *testing.T) {
	t.Parallel()
	require.Equal(t, 55*time.Second, worker.DefaultLease(30*time.Second))
	require.Equal(t, 55*time.Second, worker.DefaultLease(0), "zero: the default send timeout")
	require.Equal(t, 26*time.Second, worker.DefaultLease(time.Second))
	for _, st := range []time.Duration{time.Second, 30 * time.Second, 5 * time.Minute} {
		_, err := worker.New(nil, &fakeStore{}, email(&fakeSender{}, worker.Channel{SendTimeout: st}), worker.Config{Lease: worker.DefaultLease(st)})
		require.NoError(t, err)
	}
}

// slowClaimStore is a fakeStore whose claims take delay.
type slowClaimStore struct {
	fakeStore
	delay time.Duration
}

func (s *slowClaimStore) ClaimAndRecord(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration, rs []notify.DeliveryResult) ([]notify.Claim, []bool, error) {
	if len(reqs) > 0 {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	return s.fakeStore.ClaimAndRecord(ctx, reqs, lease, rs)
}

// deadlineSender notes the deadline of each send.
type deadlineSender struct {
	fakeSender
	deadlines []time.Time
}

func (s *deadlineSender) Send(ctx context.Context, e notify.Outgoing) error {
	d, _ := ctx.Deadline()
	s.mu.Lock()
	s.deadlines = append(s.deadlines, d)
	s.mu.Unlock()
	return s.fakeSender.Send(ctx, e)
}

// Issue 16, defect 5: a send ends where the lease, measured from before
// the claim, still leaves time for the record; a claim that took so long
// that none is left sends nothing and hands the delivery back.
func TestLeaseBoundsTheSend(t *testing.T) {
	t.Parallel()
	// Lease 21.5s: the send must end 15s (a record's transaction and the
	// margin) before it, 6.5s after the claim started.
	const lease = 21*time.Second + 500*time.Millisecond
	t.Run("cut short", func(t *testing.T) {
		t.Parallel()
		store := &slowClaimStore{delay: 6 * time.Second}
		snd := &deadlineSender{}
		w := newWorkerOn(t, store, worker.Channel{Sender: snd, SendTimeout: time.Second}, worker.Config{Lease: lease})
		d := &fakeDelivery{msg: message(t, 0)}
		start := time.Now()
		w.Handle(context.Background(), d)
		require.Equal(t, []string{"ack"}, d.hows())
		require.Len(t, snd.deadlines, 1)
		require.WithinDuration(t, start.Add(6500*time.Millisecond), snd.deadlines[0], 400*time.Millisecond,
			"the lease's bound, not the send timeout's (7s)")
	})
	t.Run("cut short and timed out", func(t *testing.T) {
		t.Parallel()
		// The send runs into the deadline the lease set (not the send
		// timeout): a limit of the worker's own, so no attempt is spent.
		store := &slowClaimStore{delay: 6 * time.Second}
		w := newWorkerOn(t, store, worker.Channel{Sender: hangingSender{}, SendTimeout: 1400 * time.Millisecond}, worker.Config{Lease: lease, MaxRetries: 0})
		d := &fakeDelivery{msg: message(t, 0)}
		w.Handle(context.Background(), d)
		require.Equal(t, []string{"release"}, d.hows())
		recs := store.recs()
		require.Len(t, recs, 1)
		require.Equal(t, notify.AttemptDeferred, recs[0].outcome, "no attempt spent on the worker's own deadline")
	})
	t.Run("no time left", func(t *testing.T) {
		t.Parallel()
		store := &slowClaimStore{delay: 7 * time.Second}
		snd := &deadlineSender{}
		w := newWorkerOn(t, store, worker.Channel{Sender: snd, SendTimeout: time.Second}, worker.Config{Lease: lease})
		d := &fakeDelivery{msg: message(t, 0)}
		w.Handle(context.Background(), d)
		require.Equal(t, []string{"release"}, d.hows())
		require.Zero(t, snd.count())
		recs := store.recs()
		require.Len(t, recs, 1)
		require.Equal(t, notify.AttemptDeferred, recs[0].outcome, "the claim released, no attempt spent")
	})
}

// Issue 16, defect 1, and issue 32: a turn under the rate limit further
// away than a delivery waits in place (Patience) is not waited for: the
// delivery is parked until its turn, before its claim, with no attempt
// spent; when it comes back at that time it sends without a new turn.
func TestRateTurnTooFarParksUntilTheTurn(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	snd := &fakeSender{}
	// 0.5/s: one send each 2s; a delivery waits 1s at most.
	w := newWorkerOn(t, store, worker.Channel{Sender: snd, Rate: 0.5}, worker.Config{Patience: time.Second})
	first := &fakeDelivery{msg: message(t, 0)}
	w.Handle(context.Background(), first)
	require.Equal(t, []string{"ack"}, first.hows())
	second := &fakeDelivery{msg: notify.Message{ID: 71, Type: notify.EventRequested, Payload: payload(t)}}
	w.Handle(context.Background(), second)
	require.Equal(t, []string{"release"}, second.hows())
	after := second.settled[0].after
	require.Greater(t, after, time.Second, "parked until its turn, not handed back at once")
	require.LessOrEqual(t, after, 2*time.Second)
	require.Equal(t, 1, snd.count())
	require.Len(t, store.claims, 1, "no claim for the parked delivery")
	third := &fakeDelivery{msg: notify.Message{ID: 72, Type: notify.EventRequested, Payload: payload(t)}}
	w.Handle(context.Background(), third)
	require.Greater(t, third.settled[0].after, after+time.Second, "the next one parks a turn later")

	// Back at its turn, the parked delivery sends on the turn it was given.
	time.Sleep(after) // the transport's delay, as a parked message keeps it
	again := &fakeDelivery{msg: second.msg}
	w.Handle(context.Background(), again)
	require.Equal(t, []string{"ack"}, again.hows())
	require.Equal(t, 2, snd.count())
}

// Throttling spends no attempt and closes the gate, which SenderStatus
// reports.
func TestThrottledIsDeferred(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	snd := &fakeSender{err: notify.Throttled(errors.New("421 4.7.0 slow down"), time.Minute)}
	w := newWorker(t, store, snd, worker.Config{MaxRetries: 0})
	d := &fakeDelivery{msg: message(t, 0)}
	w.Handle(context.Background(), d)
	require.Equal(t, []string{"release"}, d.hows())
	require.Equal(t, []rec{{"deferred", "421 4.7.0 slow down"}}, store.recs())
	up, reason := w.SenderStatus()
	require.False(t, up)
	require.Equal(t, "mail server throttled: 421 4.7.0 slow down", reason)
}

// Issue 16, defect 3: with OutageSpendsAttempts, a server that is down
// costs the message its attempts (retry, then dead letter) and the gate
// stays open; throttling still spends none.
func TestOutageSpendsAttempts(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	snd := &fakeSender{err: notify.SenderDown(errors.New("dial: no such host"))}
	w := newWorker(t, store, snd, worker.Config{MaxRetries: 1, OutageSpendsAttempts: true})
	d := &fakeDelivery{msg: message(t, 0)}
	w.Handle(context.Background(), d)
	require.Equal(t, []string{"retry"}, d.hows())
	d = &fakeDelivery{msg: message(t, 1)}
	w.Handle(context.Background(), d)
	require.Equal(t, []string{"dead"}, d.hows())
	require.Equal(t, []rec{{"retry", "dial: no such host"}, {"dead", "dial: no such host"}}, store.recs())
	up, _ := w.SenderStatus()
	require.True(t, up, "the gate stays open")

	snd.setErr(notify.Throttled(errors.New("421 slow down"), 0))
	d = &fakeDelivery{msg: message(t, 0)}
	w.Handle(context.Background(), d)
	require.Equal(t, []string{"release"}, d.hows())
	up, _ = w.SenderStatus()
	require.False(t, up)
}

// Issue 16, defect 4: a record that keeps failing is retried until the
// worker stops and a grace has passed; only then is the delivery handed
// back.
func TestRecordGivesUpOnlyAfterStopAndGrace(t *testing.T) {
	t.Parallel()
	store := &fakeStore{recordErr: errors.New("connection refused")}
	ctx, cancel := context.WithCancel(context.Background())
	snd := &cancelingSender{cancel: cancel}
	w := newWorker(t, store, snd, worker.Config{})
	d := &fakeDelivery{msg: message(t, 0)}
	start := time.Now()
	w.Handle(ctx, d)
	require.Equal(t, []string{"release"}, d.hows())
	require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "the grace")
	store.mu.Lock()
	defer store.mu.Unlock()
	require.Greater(t, len(store.failedRecords), 2, "retried meanwhile")
}

// cancelingSender sends, then ends the worker's ctx: the worker stops
// right after an accepted send.
type cancelingSender struct {
	fakeSender
	cancel func()
}

func (s *cancelingSender) Send(ctx context.Context, e notify.Outgoing) error {
	defer s.cancel()
	return s.fakeSender.Send(ctx, e)
}

// The dead record of a poison message is retried too.
func TestPoisonRecordRetried(t *testing.T) {
	t.Parallel()
	store := &fakeStore{recordErr: errors.New("connection refused"), recordFails: 1}
	w := newWorker(t, store, &fakeSender{}, worker.Config{})
	d := &fakeDelivery{msg: notify.Message{ID: 9, Type: notify.EventRequested, Payload: []byte(`{"notification_id":"7"`)}}
	w.Handle(context.Background(), d)
	require.Equal(t, []string{"dead"}, d.hows())
	recs := store.recs()
	require.Len(t, recs, 1)
	require.Equal(t, notify.AttemptDead, recs[0].outcome)
}

// MaxRetries zero means no retries, not a default: the first failure is
// dead-lettered.
func TestZeroRetriesDeadLettersTheFirstFailure(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	w := newWorker(t, store, &fakeSender{err: errors.New("451 try later")}, worker.Config{})
	d := &fakeDelivery{msg: message(t, 0)}
	w.Handle(context.Background(), d)
	require.Equal(t, []settle{{how: "dead", reason: "451 try later"}}, d.settled)
	require.Equal(t, []rec{{"dead", "451 try later"}}, store.recs())
}

// probingSender is a fakeSender with a Probe that fails while down is set.
type probingSender struct {
	fakeSender
	mu     sync.Mutex
	down   bool
	probes int
}

func (s *probingSender) Probe(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes++
	if s.down {
		return errors.New("535 authentication failed")
	}
	return nil
}

func (s *probingSender) state() (probes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probes
}

func (s *probingSender) up() {
	s.mu.Lock()
	s.down = false
	s.mu.Unlock()
	s.setErr(nil)
}

// A mail server that is down costs no attempt: the failed delivery is
// released, later ones wait without sending while the worker probes with a
// growing backoff, and everything resumes by itself when the server is
// back; herald_sender_up and one ERROR and one INFO record say so.
func TestSenderDownPausesProbesAndResumes(t *testing.T) {
	t.Parallel()
	for _, withProber := range []bool{true, false} {
		name := "probe"
		if !withProber {
			name = "a real send probes"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &fakeStore{}
			snd := &probingSender{down: true}
			snd.err = notify.SenderDown(errors.New("535 authentication failed"))
			var sender worker.Sender = snd
			if !withProber {
				sender = &snd.fakeSender // no Probe method
			}
			logs := &testlog.Buffer{}
			reg := prometheus.NewRegistry()
			w := newWorker(t, store, sender, worker.Config{
				SenderBackoff: 5 * time.Millisecond, SenderBackoffMax: 20 * time.Millisecond, Registerer: reg,
				Logger: slog.New(slog.NewTextHandler(logs, nil)),
			})
			gauge := func() float64 {
				mfs, err := reg.Gather()
				require.NoError(t, err)
				for _, mf := range mfs {
					if mf.GetName() == "herald_sender_up" {
						require.Equal(t, "channel", mf.GetMetric()[0].GetLabel()[0].GetName())
						require.Equal(t, "email", mf.GetMetric()[0].GetLabel()[0].GetValue())
						return mf.GetMetric()[0].GetGauge().GetValue()
					}
				}
				t.Fatal("no herald_sender_up")
				return 0
			}
			require.Equal(t, 1.0, gauge())

			first := &fakeDelivery{msg: message(t, 0)}
			w.Handle(context.Background(), first)
			require.Equal(t, []string{"release"}, first.hows())
			require.Equal(t, 0.0, gauge())
			require.Equal(t, []rec{{"deferred", "535 authentication failed"}}, store.recs())

			// The next delivery waits at the closed gate; handed back (it
			// waited its longest, or its send was the probe and failed), it
			// is handled again, as a transport redelivers it.
			second := &fakeDelivery{msg: message(t, 0)}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					w.Handle(context.Background(), second)
					if h := second.hows(); h[len(h)-1] != "release" {
						return
					}
				}
			}()
			if withProber {
				require.Eventually(t, func() bool { return snd.state() >= 3 }, 5*time.Second, time.Millisecond, "probes")
				require.Equal(t, 1, snd.count(), "no send while the server is down")
			} else {
				require.Eventually(t, func() bool { return snd.count() >= 3 }, 5*time.Second, time.Millisecond, "probing sends")
			}
			require.Equal(t, 0.0, gauge())
			snd.up()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the worker did not resume")
			}
			hows := second.hows()
			require.Equal(t, "ack", hows[len(hows)-1])
			for _, h := range hows[:len(hows)-1] {
				require.Equal(t, "release", h)
			}
			require.Equal(t, 1.0, gauge())
			for _, r := range store.recs() {
				require.NotEqual(t, notify.AttemptRetry, r.outcome, "no attempt spent")
				require.NotEqual(t, notify.AttemptDead, r.outcome, "nothing dead-lettered")
			}
			out := logs.String()
			require.Equal(t, 1, strings.Count(out, "sends paused"), out)
			require.Contains(t, out, "535 authentication failed")
			require.Equal(t, 1, strings.Count(out, "mail server back"), out)
			require.Equal(t, 0, testutil.CollectAndCount(reg, "herald_worker_deliveries_total")-8, "outcome labels of email and unknown")
		})
	}
}

func (s *fakeStore) ClaimAndRecord(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration, rs []notify.DeliveryResult) ([]notify.Claim, []bool, error) {
	var (
		ok  []bool
		cs  []notify.Claim
		err error
	)
	if len(rs) > 0 {
		if ok, err = s.RecordDeliveries(ctx, rs); err != nil {
			return nil, nil, err
		}
	}
	if len(reqs) > 0 {
		if cs, err = s.ClaimDeliveries(ctx, reqs, lease); err != nil {
			return nil, nil, err
		}
	}
	return cs, ok, nil
}

// hangingSender answers only when its context ends, as a server that never
// answers the message's DATA does.
type hangingSender struct{}

func (hangingSender) Send(ctx context.Context, _ notify.Outgoing) error {
	<-ctx.Done()
	return fmt.Errorf("the message was not accepted in time: %w", ctx.Err())
}

// Issue 11, defect 1, with the stale-copy guard: a retry copy the
// transport cannot publish is tried again while the worker runs; only a
// stopping worker hands the original back (the reconciler then re-announces
// the notification once its retry is overdue).
func TestRetryPublishGivenUpOnlyWhenStopping(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	snd := &fakeSender{err: errors.New("451 try later")}
	w := newWorker(t, store, snd, worker.Config{MaxRetries: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &fakeDelivery{msg: message(t, 0), retryErr: errors.New("channel closed"), onRetryFail: func(calls int) {
		if calls == 4 {
			cancel() // the worker stops while the broker is still down
		}
	}}
	w.Handle(ctx, d)
	require.Equal(t, []string{"release"}, d.hows())
	require.Equal(t, 4, d.retryCalls, "tried until the stop")
	require.Equal(t, []rec{{"retry", "451 try later"}}, store.recs())
}
