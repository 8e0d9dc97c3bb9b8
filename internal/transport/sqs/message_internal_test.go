package sqs

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

func event(id int64, user string) notify.Event {
	return notify.Event{
		ID: id, Type: notify.EventRequested,
		Payload:    []byte(`{"notification_id":"7","user_id":"` + user + `","channel":"email","to":"a@example.com","subject":"s","body":"b"}`),
		OccurredAt: time.UnixMicro(1_700_000_000_123_456).UTC(),
	}
}

// TestFIFORequest checks the request the relay builds for a FIFO queue:
// MessageGroupId is the user_id, MessageDeduplicationId the outbox id, and
// the contract's attributes are there; a standard queue's has neither id.
func TestFIFORequest(t *testing.T) {
	e := newMessage(event(42, "user-9"), true).toEntry("42")
	require.Equal(t, "user-9", aws.ToString(e.MessageGroupId))
	require.Equal(t, "42", aws.ToString(e.MessageDeduplicationId))
	require.Equal(t, "42", aws.ToString(e.Id))
	require.Equal(t, "42", aws.ToString(e.MessageAttributes[AttrMessageID].StringValue))
	require.Equal(t, "Number", aws.ToString(e.MessageAttributes[AttrMessageID].DataType))
	require.Equal(t, notify.EventRequested, aws.ToString(e.MessageAttributes[AttrType].StringValue))
	require.Equal(t, "1700000000123456", aws.ToString(e.MessageAttributes[AttrOccurredAt].StringValue))
	require.Zero(t, e.DelaySeconds)

	std := newMessage(event(42, "user-9"), false).toEntry("42")
	require.Nil(t, std.MessageGroupId)
	require.Nil(t, std.MessageDeduplicationId)
}

// TestFIFOGroup: a user_id SQS would refuse as a group id becomes a digest
// (the same for the same user); a payload without one goes to one group.
func TestFIFOGroup(t *testing.T) {
	long := strings.Repeat("u", 200)
	g := groupOf(event(1, long).Payload)
	require.True(t, strings.HasPrefix(g, "sha256-"), g)
	require.LessOrEqual(t, len(g), 128)
	require.Equal(t, g, groupOf(event(2, long).Payload))
	require.NotEqual(t, g, groupOf(event(3, long+"x").Payload))
	require.True(t, strings.HasPrefix(groupOf(event(1, "jörg").Payload), "sha256-"))
	require.Equal(t, "herald", groupOf([]byte(`not json`)))
}

func received(retries string) types.Message {
	m := types.Message{
		MessageId: aws.String("m-1"), Body: aws.String(string(event(42, "user-9").Payload)),
		MessageAttributes: map[string]types.MessageAttributeValue{
			AttrMessageID: numberAttr(42), AttrType: stringAttr(notify.EventRequested), AttrOccurredAt: numberAttr(1_700_000_000_123_456),
		},
	}
	if retries != "" {
		m.MessageAttributes[AttrRetryCount] = stringAttr(retries)
	}
	return m
}

// TestRetryCopy: a FIFO retry copy keeps the group, takes a deduplication
// id of its own per retry count, and has no DelaySeconds (FIFO queues have
// no per-message delay): the whole delay is held on arrival.
func TestRetryCopy(t *testing.T) {
	cp := copyOf(received("1"), 2, "451 later", 0, true, "r2")
	rest := cp.withDelay(40*time.Minute, true)
	in := cp.toSend("q")
	require.Equal(t, "user-9", aws.ToString(in.MessageGroupId))
	require.Equal(t, "42-r2", aws.ToString(in.MessageDeduplicationId))
	require.Zero(t, in.DelaySeconds)
	require.Equal(t, 40*time.Minute, rest)
	require.Equal(t, "2", aws.ToString(in.MessageAttributes[AttrRetryCount].StringValue))
	require.Equal(t, "451 later", aws.ToString(in.MessageAttributes[AttrLastError].StringValue))

	dl := copyOf(received("1"), 1, "550", 0, true, "dlq").toSend("d")
	require.Equal(t, "42-dlq", aws.ToString(dl.MessageDeduplicationId))
}

// TestDelayHops: SQS delays at most 15 minutes; a longer delay is sent
// with 900s and the rest to hold, sub-second delays round up to 1s.
func TestDelayHops(t *testing.T) {
	for _, tc := range []struct {
		delay time.Duration
		secs  int32
		rest  time.Duration
	}{
		{200 * time.Millisecond, 1, 0},
		{30 * time.Second, 30, 0},
		{15 * time.Minute, 900, 0},
		{40 * time.Minute, 900, 25 * time.Minute},
		{0, 0, 0},
	} {
		m := copyOf(received(""), 1, "", 0, false, "")
		rest := m.withDelay(tc.delay, false)
		require.Equal(t, tc.secs, m.toSend("q").DelaySeconds, "delay %s", tc.delay)
		require.Equal(t, tc.rest, rest, "delay %s", tc.delay)
	}
}

// TestDecode reads herald's attributes back and refuses a message without
// a valid outbox id.
func TestDecode(t *testing.T) {
	d, err := decode(received("3"))
	require.NoError(t, err)
	require.Equal(t, int64(42), d.msg.ID)
	require.Equal(t, 3, d.msg.RetryCount)
	require.Equal(t, notify.EventRequested, d.msg.Type)
	require.True(t, d.msg.OccurredAt.Equal(time.UnixMicro(1_700_000_000_123_456)))

	bad := received("")
	bad.MessageAttributes[AttrMessageID] = stringAttr("abc")
	_, err = decode(bad)
	require.ErrorContains(t, err, "not a herald message")
	delete(bad.MessageAttributes, AttrMessageID)
	_, err = decode(bad)
	require.ErrorContains(t, err, "not a herald message")
}

func TestParseURL(t *testing.T) {
	c, err := ParseURL("sqs://eu-west-1/orders?endpoint=http://127.0.0.1:4100&fifo=true")
	require.NoError(t, err)
	require.Equal(t, Config{Region: "eu-west-1", Settings: consume.Settings{Prefix: "orders"}, Endpoint: "http://127.0.0.1:4100", FIFO: true}, c)
	require.Equal(t, Topology{Send: "orders-send.fifo", DeadLetter: "orders-send-dlq.fifo", Status: "orders-status.fifo", FIFO: true}, c.Topology())

	c, err = ParseURL("sqs://us-east-1")
	require.NoError(t, err)
	require.Equal(t, Topology{Send: "notifications-send", DeadLetter: "notifications-send-dlq", Status: "notifications-status"}, c.Topology())

	for _, bad := range []string{
		"sqs:///prefix",
		"sqs://AKIASECRET:hunter2@us-east-1/p",
		"sqs://us-east-1/p?endpoint=ftp://x",
		"sqs://us-east-1/p?fifo=maybe",
		"sqs://us-east-1/p?secret=hunter2",
		"http://us-east-1/p",
	} {
		_, err := ParseURL(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "hunter2", bad)
	}
	_, err = NewPublisher(Config{Region: "us-east-1", Settings: consume.Settings{Prefix: "bad name"}})
	require.ErrorContains(t, err, "invalid queue name")
}

// TestStatusFIFORequest: a status event on a FIFO status queue is grouped
// by its user_id and deduplicated on its outbox id, like a request.
func TestStatusFIFORequest(t *testing.T) {
	ev := notify.Event{
		ID: 43, Type: notify.EventSent,
		Payload:    []byte(`{"notification_id":"7","user_id":"user-9","channel":"email","status":"sent","attempts":1,"at":"2026-01-02T03:04:05Z","last_error":""}`),
		OccurredAt: time.UnixMicro(1_700_000_000_123_456).UTC(),
	}
	e := newMessage(ev, true).toEntry("43")
	require.Equal(t, "user-9", aws.ToString(e.MessageGroupId))
	require.Equal(t, "43", aws.ToString(e.MessageDeduplicationId))
	require.Equal(t, "43", aws.ToString(e.MessageAttributes[AttrMessageID].StringValue))
	require.Equal(t, notify.EventSent, aws.ToString(e.MessageAttributes[AttrType].StringValue))
	require.Equal(t, "1700000000123456", aws.ToString(e.MessageAttributes[AttrOccurredAt].StringValue))
}
