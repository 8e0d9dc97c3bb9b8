package sqs_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/sqstest"
	sqstr "github.com/heraldhq/herald/internal/transport/sqs"
)

// statusEvent is the outbox event of a settled notification, as the
// recording transaction writes it.
func statusEvent(t *testing.T, id int64, status notify.Status) notify.Event {
	t.Helper()
	typ, err := notify.StatusEventType(status)
	require.NoError(t, err)
	at := time.Now().UTC().Truncate(time.Microsecond)
	payload, err := json.Marshal(notify.StatusEvent{
		NotificationID: notify.FormatID(id + 1000), UserID: "user-" + strconv.FormatInt(id, 10),
		Channel: notify.ChannelEmail, Status: string(status), Attempts: 3, At: at, LastError: "451 try later",
	})
	require.NoError(t, err)
	return notify.Event{ID: id, Type: typ, Payload: payload, OccurredAt: at}
}

// A mixed batch (a status event, a request, another status event) is
// stored whole; the status events wait in PREFIX-status for another
// service, with the contract's attributes, and the worker receives the
// request alone.
func TestStatusEventsGoToTheStatusQueue(t *testing.T) {
	cfg := config(t)
	topo := cfg.Topology()
	require.Equal(t, cfg.Prefix+"-status", topo.Status)
	pub := newPublisher(t, cfg)
	sent := statusEvent(t, 1, notify.StatusSent)
	requested := testEvents(2, "")[1]
	failed := statusEvent(t, 3, notify.StatusFailed)
	batch := []notify.Event{sent, requested, failed}
	got, err := pub.Publish(t.Context(), batch)
	require.NoError(t, err)
	require.Equal(t, ids(batch), got)
	n, ok := sqstest.Queue(topo.Status)
	require.True(t, ok, "no status queue")
	require.Equal(t, 2, n)

	// The worker.
	var (
		mu      sync.Mutex
		handled []notify.Message
	)
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		if assert.NoError(t, d.Ack(ctx)) {
			mu.Lock()
			handled = append(handled, d.Message())
			mu.Unlock()
		}
	})
	require.Eventually(t, func() bool {
		n, _ := sqstest.Queue(topo.Send)
		mu.Lock()
		defer mu.Unlock()
		return n == 0 && len(handled) > 0
	}, wait, tick, "the request was not delivered and deleted")
	mu.Lock()
	require.Len(t, handled, 1)
	require.Equal(t, requested.ID, handled[0].ID)
	require.Equal(t, notify.EventRequested, handled[0].Type)
	mu.Unlock()
	n, _ = sqstest.Queue(topo.Status)
	require.Equal(t, 2, n, "a herald worker took from the status queue")

	// Another service.
	c, err := cfg.NewClient(t.Context())
	require.NoError(t, err)
	u, err := c.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topo.Status)})
	require.NoError(t, err)
	msgs := map[string]types.Message{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := c.ReceiveMessage(t.Context(), &awssqs.ReceiveMessageInput{
			QueueUrl: u.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"},
		})
		require.NoError(ct, err)
		for _, m := range out.Messages {
			msgs[aws.ToString(m.MessageAttributes[sqstr.AttrMessageID].StringValue)] = m
			_, err := c.DeleteMessage(t.Context(), &awssqs.DeleteMessageInput{QueueUrl: u.QueueUrl, ReceiptHandle: m.ReceiptHandle})
			require.NoError(ct, err)
		}
		require.Len(ct, msgs, 2)
	}, wait, tick, "the status events did not reach their queue's reader")
	for _, ev := range []notify.Event{sent, failed} {
		m, ok := msgs[notify.FormatID(ev.ID)]
		require.True(t, ok, "status event %d", ev.ID)
		assert.Equal(t, ev.Type, aws.ToString(m.MessageAttributes[sqstr.AttrType].StringValue))
		assert.Equal(t, strconv.FormatInt(ev.OccurredAt.UnixMicro(), 10), aws.ToString(m.MessageAttributes[sqstr.AttrOccurredAt].StringValue))
		assert.JSONEq(t, string(ev.Payload), aws.ToString(m.Body))
	}
}

// An event of a type herald does not publish is refused, and the others of
// its batch are stored.
func TestUnknownEventTypeRefused(t *testing.T) {
	cfg := config(t)
	pub := newPublisher(t, cfg)
	bogus := statusEvent(t, 2, notify.StatusSent)
	bogus.Type = "notification.delivered"
	got, err := pub.Publish(t.Context(), []notify.Event{statusEvent(t, 1, notify.StatusSent), bogus})
	require.ErrorContains(t, err, `no queue for event type "notification.delivered"`)
	require.Equal(t, []int64{1}, got)
	for queue, want := range map[string]int{cfg.Topology().Status: 1, cfg.Topology().Send: 0} {
		n, ok := sqstest.Queue(queue)
		require.True(t, ok, queue)
		require.Equal(t, want, n, queue)
	}
}

// More than a batch of each kind, interleaved: every event is stored, in
// batches of ten per queue.
func TestStatusEventsManyBatches(t *testing.T) {
	cfg := config(t)
	pub := newPublisher(t, cfg)
	reqs := testEvents(25, "")
	var batch []notify.Event
	for i, ev := range reqs {
		ev.ID = int64(2*i + 1)
		batch = append(batch, ev, statusEvent(t, int64(2*i+2), notify.StatusSent))
	}
	got, err := pub.Publish(t.Context(), batch)
	require.NoError(t, err)
	require.Equal(t, ids(batch), got)
	for _, queue := range []string{cfg.Topology().Status, cfg.Topology().Send} {
		n, _ := sqstest.Queue(queue)
		require.Equal(t, 25, n, queue)
	}
}
