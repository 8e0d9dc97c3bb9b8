package sqstest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/Admiral-Piett/goaws/app"
)

// receiveShim answers ReceiveMessage as SQS does, since goaws v0.4.5 does
// not. On every queue a receive's own VisibilityTimeout holds (goaws makes
// a message invisible for the queue's, whatever the receive asks, and
// herald declares none: each process asks for its own), and
// ApproximateReceiveCount counts the receipts (goaws reports 1); a message
// about to be received more often than the redrive policy's
// maxReceiveCount moves to the dead-letter queue instead. On FIFO queues,
// where goaws remembers one locked group per queue (locking another
// forgets it, so one receive hands out several messages of a group while
// an earlier one is in flight), marks a message of a locked group in
// flight without returning it (it comes back after the visibility timeout,
// out of order) and keeps the group locked at a visibility of 0: here, as
// on SQS, a group with a message in flight (received, neither deleted nor
// visible again) gives nothing, and one receive returns several messages
// of a group, in order.
func (s *Server) receiveShim(next http.Handler) http.Handler {
	return shim("ReceiveMessage", next, func(w http.ResponseWriter, r *http.Request) {
		name := r.Form.Get("QueueUrl")
		name = name[strings.LastIndex(name, "/")+1:]
		app.SyncQueues.RLock()
		q, ok := app.SyncQueues.Queues[name]
		var queueVis, queueWait int
		if ok {
			queueVis, queueWait = q.TimeoutSecs, q.ReceiveWaitTimeSecs
		}
		app.SyncQueues.RUnlock()
		if !ok {
			next.ServeHTTP(w, r) // goaws's own answer for a missing queue
			return
		}
		most := formInt(r, "MaxNumberOfMessages", 1)
		most = min(max(most, 1), 10)
		wait := formInt(r, "WaitTimeSeconds", queueWait)
		vis := formInt(r, "VisibilityTimeout", queueVis)
		deadline := time.Now().Add(time.Duration(wait) * time.Second)
		for {
			msgs, found := receive(name, most, time.Duration(vis)*time.Second)
			if !found {
				next.ServeHTTP(w, r) // goaws's own answer for a missing queue
				return
			}
			if len(msgs) > 0 || !time.Now().Before(deadline) {
				w.Header().Set("Content-Type", "application/xml")
				_ = xml.NewEncoder(w).Encode(app.ReceiveMessageResponse{
					Xmlns:    "http://queue.amazonaws.com/doc/2012-11-05/",
					Result:   app.ReceiveMessageResult{Message: msgs},
					Metadata: app.ResponseMetadata{RequestId: "00000000-0000-0000-0000-000000000003"},
				})
				return
			}
			t := time.NewTimer(100 * time.Millisecond) // goaws's own long-poll step
			select {
			case <-r.Context().Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	})
}

func formInt(r *http.Request, key string, def int) int {
	if v, err := strconv.Atoi(r.Form.Get(key)); err == nil {
		return v
	}
	return def
}

// receive takes up to most messages of the queue name, in order, skipping
// those in flight or not yet due and, on a FIFO queue, every group with a
// message in flight or not yet due.
func receive(name string, most int, vis time.Duration) ([]*app.ResultMessage, bool) {
	app.SyncQueues.Lock()
	defer app.SyncQueues.Unlock()
	q, ok := app.SyncQueues.Queues[name]
	if !ok {
		return nil, false
	}
	blocked := map[string]bool{}
	for _, m := range q.Messages {
		if m.ReceiptHandle != "" {
			blocked[m.GroupID] = true
		}
	}
	now := time.Now()
	var out []*app.ResultMessage
	for i := 0; i < len(q.Messages) && len(out) < most; i++ {
		m := &q.Messages[i]
		if m.ReceiptHandle != "" || q.IsFIFO && blocked[m.GroupID] {
			continue
		}
		if !m.IsReadyForReceipt() {
			blocked[m.GroupID] = true // on FIFO, its group's later messages wait behind it
			continue
		}
		if q.DeadLetterQueue != nil && q.MaxReceiveCount > 0 && m.NumberOfReceives >= q.MaxReceiveCount {
			q.DeadLetterQueue.Messages = append(q.DeadLetterQueue.Messages, *m)
			q.Messages = append(q.Messages[:i], q.Messages[i+1:]...)
			i--
			continue
		}
		m.NumberOfReceives++
		m.ReceiptHandle = m.Uuid + "#" + token()
		m.ReceiptTime = now.UTC()
		m.VisibilityTimeout = now.Add(vis)
		out = append(out, result(m))
	}
	return out, true
}

func result(m *app.Message) *app.ResultMessage {
	r := &app.ResultMessage{
		MessageId: m.Uuid, ReceiptHandle: m.ReceiptHandle, MD5OfBody: m.MD5OfMessageBody, Body: m.MessageBody,
		MD5OfMessageAttributes: m.MD5OfMessageAttributes,
		Attributes: []*app.ResultAttribute{
			{Name: "ApproximateReceiveCount", Value: strconv.Itoa(m.NumberOfReceives)},
			{Name: "MessageGroupId", Value: m.GroupID},
			{Name: "SentTimestamp", Value: strconv.FormatInt(m.SentTime.UnixMilli(), 10)},
			{Name: "SenderId", Value: app.CurrentEnvironment.AccountID},
		},
	}
	for _, a := range m.MessageAttributes {
		v := &app.ResultMessageAttributeValue{DataType: a.DataType}
		if a.DataType == "Binary" {
			v.BinaryValue = a.Value
		} else {
			v.StringValue = a.Value
		}
		r.MessageAttributes = append(r.MessageAttributes, &app.ResultMessageAttribute{Name: a.Name, Value: v})
	}
	return r
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
