package sqs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// message is one SQS message herald sends, before it is put into a
// request: the transport's only knowledge of the wire is in toEntry and
// toSend, so that moving to another SDK (or protocol) touches those alone.
type message struct {
	body  string
	attrs map[string]types.MessageAttributeValue
	// group and dedup are FIFO's MessageGroupId and MessageDeduplicationId
	// ("" on a standard queue).
	group, dedup string
	// delay is the DelaySeconds of the message (0 on a FIFO queue, which
	// has no per-message delay).
	delay int32
}

func stringAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func numberAttr(v int64) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(v, 10))}
}

// newMessage is the message the relay publishes for an outbox event.
func newMessage(ev notify.Event, fifo bool) message {
	id := notify.FormatID(ev.ID)
	m := message{
		body: string(ev.Payload),
		attrs: map[string]types.MessageAttributeValue{
			AttrMessageID:   numberAttr(ev.ID),
			AttrType:        stringAttr(ev.Type),
			AttrPublishedAt: numberAttr(time.Now().UnixMicro()),
		},
	}
	if !ev.OccurredAt.IsZero() {
		m.attrs[AttrOccurredAt] = numberAttr(ev.OccurredAt.UnixMicro())
	}
	if ev.Traceparent != "" {
		m.attrs[AttrTraceparent] = stringAttr(ev.Traceparent)
	}
	if p := ev.Priority.OrDefault(); p != notify.PriorityNormal {
		m.attrs[AttrPriority] = stringAttr(string(p))
	}
	if fifo {
		m.group = groupOf(ev.Payload)
		m.dedup = id
	}
	return m
}

// groupOf is a FIFO message's MessageGroupId: the notification's user_id,
// so that one user's messages keep their order. A user_id SQS would refuse
// as a group id (too long, or characters outside ASCII punctuation and
// alphanumerics) is replaced by a digest of itself, which keeps the order
// per user all the same; a payload without one goes to group "herald".
func groupOf(payload []byte) string {
	var p struct {
		UserID string `json:"user_id"`
	}
	if json.Unmarshal(payload, &p) != nil || p.UserID == "" {
		return "herald"
	}
	if len(p.UserID) <= 128 && printableASCII(p.UserID) {
		return p.UserID
	}
	sum := sha256.Sum256([]byte(p.UserID))
	return "sha256-" + hex.EncodeToString(sum[:])
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return false
		}
	}
	return true
}

// copyOf returns a copy of a received message (its body and herald's
// attributes) with the retry count, reason and hold given; dedup is the
// FIFO deduplication id of the copy.
func copyOf(m types.Message, retries int, reason string, hold time.Duration, fifo bool, dedupSuffix string) message {
	out := message{body: aws.ToString(m.Body), attrs: map[string]types.MessageAttributeValue{}}
	for _, k := range []string{AttrMessageID, AttrType, AttrOccurredAt, AttrTraceparent, AttrPriority} {
		if v, ok := m.MessageAttributes[k]; ok {
			out.attrs[k] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue}
		}
	}
	out.attrs[AttrRetryCount] = numberAttr(int64(retries))
	if reason != "" {
		out.attrs[AttrLastError] = stringAttr(consume.Truncate(reason, consume.MaxReason))
	}
	if hold > 0 {
		out.attrs[AttrHold] = numberAttr(hold.Milliseconds())
	}
	if fifo {
		out.group = groupOf([]byte(out.body))
		out.dedup = dedupID(m, dedupSuffix)
	}
	return out
}

// dedupID derives a copy's FIFO deduplication id from the message id and
// what the copy is, so that a copy sent twice (a worker retried the send)
// is stored once.
func dedupID(m types.Message, suffix string) string {
	id := "unknown-" + aws.ToString(m.MessageId)
	if v, ok := m.MessageAttributes[AttrMessageID]; ok && v.StringValue != nil {
		id = *v.StringValue
	}
	s := id + "-" + suffix
	if len(s) > 128 {
		sum := sha256.Sum256([]byte(s))
		s = hex.EncodeToString(sum[:])
	}
	return s
}

// withDelay sets a standard queue's message delay, at most SQS's 15
// minutes, and returns what is left of d.
func (m *message) withDelay(d time.Duration, fifo bool) time.Duration {
	if fifo || d <= 0 {
		return d
	}
	step := min(d, maxDelay)
	m.delay = int32(seconds(step))
	return d - step
}

func (m message) toEntry(id string) types.SendMessageBatchRequestEntry {
	e := types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(m.body), MessageAttributes: m.attrs}
	if m.group != "" {
		e.MessageGroupId = aws.String(m.group)
		e.MessageDeduplicationId = aws.String(m.dedup)
	}
	if m.delay > 0 {
		e.DelaySeconds = m.delay
	}
	return e
}

// decoded is a received message as herald reads it.
type decoded struct {
	msg  notify.Message
	hold time.Duration
}

// decode reads herald's attributes; an error says the message is not
// herald's (it is dead-lettered with that reason).
func decode(m types.Message) (decoded, error) {
	raw := ""
	if v, ok := m.MessageAttributes[AttrMessageID]; ok && v.StringValue != nil {
		raw = *v.StringValue
	}
	id, ok := notify.ParseID(raw)
	if !ok {
		return decoded{}, fmt.Errorf("not a herald message: invalid %s %q", AttrMessageID, consume.Truncate(raw, 64))
	}
	d := decoded{msg: notify.Message{ID: id, Payload: []byte(aws.ToString(m.Body))}}
	if v, ok := m.MessageAttributes[AttrType]; ok {
		d.msg.Type = aws.ToString(v.StringValue)
	}
	if v, ok := m.MessageAttributes[AttrOccurredAt]; ok {
		if us, err := strconv.ParseInt(aws.ToString(v.StringValue), 10, 64); err == nil && us > 0 {
			d.msg.OccurredAt = time.UnixMicro(us).UTC()
		}
	}
	if v, ok := m.MessageAttributes[AttrTraceparent]; ok {
		d.msg.Traceparent = aws.ToString(v.StringValue)
	}
	if v, ok := m.MessageAttributes[AttrPriority]; ok {
		d.msg.Priority = notify.KnownPriority(aws.ToString(v.StringValue))
	}
	if v, ok := m.MessageAttributes[AttrPublishedAt]; ok {
		if us, err := strconv.ParseInt(aws.ToString(v.StringValue), 10, 64); err == nil && us > 0 {
			d.msg.PublishedAt = time.UnixMicro(us).UTC()
		}
	}
	if v, ok := m.MessageAttributes[AttrRetryCount]; ok {
		if n, err := strconv.Atoi(aws.ToString(v.StringValue)); err == nil && n > 0 {
			d.msg.RetryCount = n
		}
	}
	if v, ok := m.MessageAttributes[AttrHold]; ok {
		// Bounded so that a corrupt attribute cannot overflow a Duration.
		if ms, err := strconv.ParseInt(aws.ToString(v.StringValue), 10, 64); err == nil && ms > 0 {
			d.hold = time.Duration(min(ms, int64(30*24*time.Hour/time.Millisecond))) * time.Millisecond
		}
	}
	return d, nil
}

// toSend is toEntry for a single SendMessage.
func (m message) toSend(queueURL string) *awssqs.SendMessageInput {
	e := m.toEntry("")
	return &awssqs.SendMessageInput{
		QueueUrl: aws.String(queueURL), MessageBody: e.MessageBody, MessageAttributes: e.MessageAttributes,
		MessageGroupId: e.MessageGroupId, MessageDeduplicationId: e.MessageDeduplicationId, DelaySeconds: e.DelaySeconds,
	}
}
