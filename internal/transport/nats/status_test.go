package nats_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	natstr "github.com/heraldhq/herald/internal/transport/nats"
)

// statusEvent is the outbox event of a settled notification, as the
// recording transaction writes it.
func statusEvent(t *testing.T, id, notificationID int64, status notify.Status) notify.Event {
	t.Helper()
	typ, err := notify.StatusEventType(status)
	require.NoError(t, err)
	at := time.Now().UTC().Truncate(time.Microsecond)
	payload, err := json.Marshal(notify.StatusEvent{
		NotificationID: notify.FormatID(notificationID),
		UserID:         "user-" + strconv.FormatInt(notificationID, 10),
		Channel:        notify.ChannelEmail,
		Status:         string(status),
		Attempts:       2,
		At:             at,
		LastError:      "550 no such user",
	})
	require.NoError(t, err)
	return notify.Event{ID: id, Type: typ, Payload: payload, OccurredAt: at}
}

// js connects to cfg's server for a test's own reads and writes.
func js(t *testing.T, cfg natstr.Config) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect(cfg.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	j, err := jetstream.New(nc)
	require.NoError(t, err)
	return j
}

// A mixed batch (a status event, a request, another status event) is
// stored whole; the worker receives the request alone, and each of two
// other services (two consumers of the status stream, as many as like)
// receives both status events, with the outbox id, type and time in their
// headers. An installation whose NOTIFICATIONS stream an older herald
// declared keeps it as it is and gains the status stream beside it.
func TestStatusEventsGoToTheStatusStream(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	for _, existing := range []bool{false, true} {
		t.Run("existing="+strconv.FormatBool(existing), func(t *testing.T) {
			cfg := config(t, srv)
			topo := cfg.Topology()
			j := js(t, cfg)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var oldCreated time.Time
			if existing {
				// The stream as the version before status events declared it.
				s, err := j.CreateStream(ctx, jetstream.StreamConfig{
					Name:        topo.Stream,
					Description: "herald notifications: requested, retries and dead letters",
					Subjects:    []string{topo.Requested, topo.Retry, topo.DeadLetter},
					Retention:   jetstream.WorkQueuePolicy,
					Storage:     jetstream.FileStorage,
					Replicas:    1,
					Duplicates:  2 * time.Minute,
					Discard:     jetstream.DiscardOld,
					MaxMsgs:     -1,
					MaxBytes:    -1,
				})
				require.NoError(t, err)
				oldCreated = s.CachedInfo().Created
			}

			sent := statusEvent(t, 11, 1, notify.StatusSent)
			requested := events(t, 12, 12)[0]
			failed := statusEvent(t, 13, 2, notify.StatusFailed)
			batch := []notify.Event{sent, requested, failed}
			pub := newPublisher(t, cfg)
			confirmed, err := pub.Publish(ctx, batch)
			require.NoError(t, err)
			require.Equal(t, ids(batch), confirmed)

			// Two services, each with a durable consumer of its own.
			status, err := j.Stream(ctx, topo.StatusStream)
			require.NoError(t, err)
			sc := status.CachedInfo().Config
			require.Equal(t, jetstream.LimitsPolicy, sc.Retention)
			require.Equal(t, natstr.DefaultStatusMaxAge, sc.MaxAge)
			for _, service := range []string{"billing", "audit"} {
				cons, err := status.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
					Durable: service, FilterSubject: cfg.Prefix + "notifications.status.>",
					AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
				})
				require.NoError(t, err, service)
				var got []jetstream.Msg
				for len(got) < 2 && ctx.Err() == nil {
					b, err := cons.Fetch(2-len(got), jetstream.FetchMaxWait(time.Second))
					require.NoError(t, err)
					for m := range b.Messages() {
						require.NoError(t, m.Ack())
						got = append(got, m)
					}
				}
				require.Len(t, got, 2, service)
				for i, want := range []struct {
					ev      notify.Event
					subject string
				}{{sent, topo.StatusSent}, {failed, topo.StatusFailed}} {
					m := got[i]
					assert.Equal(t, want.subject, m.Subject(), service)
					assert.Equal(t, notify.FormatID(want.ev.ID), m.Headers().Get(natstr.HeaderMessageID), service)
					assert.Equal(t, notify.FormatID(want.ev.ID), m.Headers().Get(natsgo.MsgIdHdr), service)
					assert.Equal(t, want.ev.Type, m.Headers().Get(natstr.HeaderType), service)
					assert.Equal(t, strconv.FormatInt(want.ev.OccurredAt.UnixMicro(), 10), m.Headers().Get(natstr.HeaderOccurredAt), service)
					assert.JSONEq(t, string(want.ev.Payload), string(m.Data()), service)
				}
			}

			// The worker gets the request and nothing else.
			var r record
			runConsumer(t, cfg, acking(t, &r))
			require.Eventually(t, func() bool { return r.distinct() == 1 }, wait, tick, "the request was not delivered")
			worker, err := j.Consumer(ctx, topo.Stream, topo.WorkerConsumer)
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				info, err := worker.Info(ctx)
				return err == nil && info.NumPending == 0 && info.NumAckPending == 0
			}, wait, tick, "the worker consumer has more to deliver")
			r.mu.Lock()
			require.Len(t, r.msgs, 1)
			require.Equal(t, requested.ID, r.msgs[0].ID)
			require.Equal(t, notify.EventRequested, r.msgs[0].Type)
			r.mu.Unlock()
			for _, subj := range []string{topo.StatusSent, topo.StatusFailed} {
				require.Zero(t, subjectCount(t, cfg, subj), "a status event in the work-queue stream")
			}
			// A status event read by both services stays (limits retention)
			// until it is StatusMaxAge old.
			info, err := status.Info(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 2, info.State.Msgs)

			if existing {
				s, err := j.Stream(ctx, topo.Stream)
				require.NoError(t, err)
				require.Equal(t, oldCreated, s.CachedInfo().Created, "the old stream was replaced")
			}
		})
	}
}

// The duplicate window covers the status stream: the relay's re-publish of
// a batch it could not mark stores each status event once.
func TestStatusEventRepublishStoredOnce(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	pub := newPublisher(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	batch := []notify.Event{statusEvent(t, 1, 1, notify.StatusSent), statusEvent(t, 2, 2, notify.StatusFailed)}
	for range 2 {
		confirmed, err := pub.Publish(ctx, batch)
		require.NoError(t, err)
		require.Equal(t, ids(batch), confirmed)
	}
	s, err := js(t, cfg).Stream(ctx, cfg.Topology().StatusStream)
	require.NoError(t, err)
	require.EqualValues(t, 2, s.CachedInfo().State.Msgs)
}

// An event of a type herald does not publish is refused, and the others of
// its batch are stored.
func TestUnknownEventTypeRefused(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cfg := config(t, srv)
	pub := newPublisher(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	bogus := statusEvent(t, 2, 2, notify.StatusSent)
	bogus.Type = "notification.delivered"
	batch := []notify.Event{statusEvent(t, 1, 1, notify.StatusSent), bogus}
	confirmed, err := pub.Publish(ctx, batch)
	require.ErrorContains(t, err, `no subject for event type "notification.delivered"`)
	require.Equal(t, []int64{1}, confirmed)
}

// A status stream that is not herald's (work-queue retention, as if somebody
// had put the subjects in a stream of their own) is refused with
// ErrTopologyMismatch, which stops the relay, and so is a stream of another
// name that holds the status subjects already.
func TestForeignStatusStreamRefused(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	cases := map[string]struct {
		foreign func(topo natstr.Topology) jetstream.StreamConfig
		says    string
	}{
		"work-queue retention": {func(topo natstr.Topology) jetstream.StreamConfig {
			return jetstream.StreamConfig{Name: topo.StatusStream, Subjects: []string{topo.StatusSent, topo.StatusFailed},
				Retention: jetstream.WorkQueuePolicy}
		}, "can not change retention"},
		"subjects in another stream": {func(topo natstr.Topology) jetstream.StreamConfig {
			return jetstream.StreamConfig{Name: topo.StatusStream + "_MINE", Subjects: []string{topo.StatusSent}}
		}, "another stream holds some of its subjects"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := config(t, srv)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			j := js(t, cfg)
			fc := tc.foreign(cfg.Topology())
			_, err := j.CreateStream(ctx, fc)
			require.NoError(t, err)
			t.Cleanup(func() { _ = j.DeleteStream(context.Background(), fc.Name) })
			pub := newPublisher(t, cfg)
			_, err = pub.Publish(ctx, []notify.Event{statusEvent(t, 1, 1, notify.StatusSent)})
			require.ErrorIs(t, err, natstr.ErrTopologyMismatch)
			require.True(t, notify.IsPermanent(err), "the relay would retry for ever: %v", err)
			require.ErrorContains(t, err, tc.says)
		})
	}
}
