package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/kafka"
)

// statusEvent is the outbox event of a settled notification, as the
// recording transaction writes it.
func statusEvent(t *testing.T, id int64, user string, status notify.Status) notify.Event {
	t.Helper()
	typ, err := notify.StatusEventType(status)
	require.NoError(t, err)
	at := time.Now().UTC().Truncate(time.Microsecond)
	payload, err := json.Marshal(notify.StatusEvent{
		NotificationID: notify.FormatID(id + 1000), UserID: user, Channel: notify.ChannelEmail,
		Status: string(status), Attempts: 1, At: at,
	})
	require.NoError(t, err)
	return notify.Event{ID: id, Type: typ, Payload: payload, OccurredAt: at}
}

// A mixed batch (a status event, a request, another status event) is
// acknowledged whole; the status events land on notifications.status keyed
// by user id with the contract's headers, and the worker, whose group never
// joins that topic, receives the request alone.
func TestStatusEventsGoToTheStatusTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	cfg := c.config(uniquePrefix(t))
	topics := cfg.Topics()
	require.Equal(t, cfg.Prefix+"notifications.status", topics.Status)
	pub := newPublisher(t, cfg)

	sent := statusEvent(t, 1, "ann", notify.StatusSent)
	requested := notify.Event{ID: 2, Type: notify.EventRequested, OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
		Payload: []byte(`{"notification_id":"2","user_id":"bob","channel":"email","to":"bob@example.com","subject":"s","body":"b"}`)}
	failed := statusEvent(t, 3, "cid", notify.StatusFailed)
	batch := []notify.Event{sent, requested, failed}
	confirmed, err := pub.Publish(t.Context(), batch)
	require.NoError(t, err)
	require.Equal(t, ids(batch), confirmed)

	// Another service reads the status topic.
	recs := readTopic(t, cfg, topics.Status)
	require.Len(t, recs, 2)
	byID := map[string]*kgo.Record{}
	for _, r := range recs {
		byID[header(r, kafka.HeaderMessageID)] = r
	}
	for _, want := range []struct {
		ev   notify.Event
		user string
	}{{sent, "ann"}, {failed, "cid"}} {
		r := byID[notify.FormatID(want.ev.ID)]
		require.NotNil(t, r, "status event %d", want.ev.ID)
		assert.Equal(t, want.user, string(r.Key))
		assert.Equal(t, want.ev.Type, header(r, kafka.HeaderType))
		assert.Equal(t, "application/json", header(r, kafka.HeaderContentType))
		assert.Equal(t, strconv.FormatInt(want.ev.OccurredAt.UnixMicro(), 10), header(r, kafka.HeaderOccurredAt))
		assert.JSONEq(t, string(want.ev.Payload), string(r.Value))
	}
	onRequested := readTopic(t, cfg, topics.Requested)
	require.Len(t, onRequested, 1)
	require.Equal(t, "2", header(onRequested[0], kafka.HeaderMessageID))

	// The worker.
	src, err := kafka.NewConsumer(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	var (
		mu  sync.Mutex
		got []notify.Message
	)
	done := make(chan error, 1)
	go func() {
		done <- src.Consume(ctx, func(ctx context.Context, d notify.Delivery) {
			if assert.NoError(t, d.Ack(ctx)) {
				mu.Lock()
				got = append(got, d.Message())
				mu.Unlock()
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	}, waitFor, 10*time.Millisecond, "the request was not delivered")

	cl, err := kgo.NewClient(cfg.ConnOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	groups, err := adm.DescribeGroups(t.Context(), topics.Group)
	require.NoError(t, err)
	joined := groups.JoinTopics()
	require.NotEmpty(t, joined)
	require.NotContains(t, joined, topics.Status, "the worker group joined the status topic")
	// Everything the worker's group was given is settled and committed:
	// the request, and nothing else.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		offs, err := adm.FetchOffsets(t.Context(), topics.Group)
		require.NoError(c, err)
		var n int64
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == topics.Requested {
				n += o.At
			}
			assert.NotEqual(c, topics.Status, o.Topic, "the worker group committed the status topic")
		})
		assert.EqualValues(c, 1, n)
	}, waitFor, 20*time.Millisecond, "the request was not committed")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1)
	require.Equal(t, requested.ID, got[0].ID)
	require.Equal(t, notify.EventRequested, got[0].Type)
}

// The status topic is created with the others by EnsureTopics.
func TestStatusTopicEnsured(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	cfg := c.config(uniquePrefix(t))
	require.NoError(t, kafka.EnsureTopics(t.Context(), cfg))
	cl, err := kgo.NewClient(cfg.ConnOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := cfg.Topics()
	names := []string{topics.Requested, topics.Retry, topics.DeadLetters, topics.Status}
	listed, err := adm.ListTopics(t.Context(), names...)
	require.NoError(t, err)
	for _, name := range names {
		d, ok := listed[name]
		require.True(t, ok && d.Err == nil, "topic %s missing", name)
		require.Len(t, d.Partitions, 6, "topic %s", name)
	}
}

// An event of a type herald does not publish is refused, and the others of
// its batch are produced.
func TestUnknownEventTypeRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	cfg := c.config(uniquePrefix(t))
	pub := newPublisher(t, cfg)
	bogus := statusEvent(t, 2, "ann", notify.StatusSent)
	bogus.Type = "notification.delivered"
	confirmed, err := pub.Publish(t.Context(), []notify.Event{statusEvent(t, 1, "ann", notify.StatusSent), bogus})
	require.ErrorContains(t, err, fmt.Sprintf("no topic for event type %q", bogus.Type))
	require.Equal(t, []int64{1}, confirmed)
	require.Len(t, readTopic(t, cfg, cfg.Topics().Status), 1)
	require.Empty(t, readTopic(t, cfg, cfg.Topics().Requested))
}
