package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/sqstest"
	"github.com/heraldhq/herald/internal/testkit/testlog"
	sqstr "github.com/heraldhq/herald/internal/transport/sqs"
)

const (
	wait = 15 * time.Second
	tick = 20 * time.Millisecond
)

func testEvents(n int, marker string) []notify.Event {
	at := time.Now().UTC().Truncate(time.Microsecond)
	evs := make([]notify.Event, n)
	for i := range evs {
		id := int64(i + 1)
		payload, _ := json.Marshal(notify.Requested{
			NotificationID: notify.FormatID(id), UserID: fmt.Sprintf("user-%d", id), Channel: notify.ChannelEmail,
			To: "someone@example.com", Subject: fmt.Sprintf("Hello %d %s", id, marker), Body: "body",
		})
		evs[i] = notify.Event{ID: id, Type: notify.EventRequested, Payload: payload, OccurredAt: at}
	}
	return evs
}

// rawClient is an SQS client of the test's own, for messages herald would
// never send.
func rawClient(t *testing.T, cfg sqstr.Config) (*awssqs.Client, string) {
	t.Helper()
	ac, err := awsconfig.LoadDefaultConfig(t.Context(), awsconfig.WithRegion(cfg.Region))
	require.NoError(t, err)
	c := awssqs.NewFromConfig(ac, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(cfg.Endpoint) })
	u, err := c.GetQueueUrl(t.Context(), &awssqs.GetQueueUrlInput{QueueName: aws.String(cfg.Topology().Send)})
	require.NoError(t, err)
	return c, aws.ToString(u.QueueUrl)
}

// consume runs a Consumer until the test ends.
func consume(t *testing.T, cfg sqstr.Config, handle notify.Handler) {
	t.Helper()
	c, err := sqstr.NewConsumer(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, c.Consume(ctx, handle)) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// TestPartialBatch: an entry SQS refuses is left out of the confirmed ids,
// with its reason, and the others are stored; publishing it again stores
// it.
func TestPartialBatch(t *testing.T) {
	srv := sqstest.Start(t)
	cfg := config(t)
	pub := newPublisher(t, cfg)
	marker := "refuse-" + cfg.Prefix
	evs := testEvents(12, "")
	bad := testEvents(12, marker)
	evs[3], evs[11] = bad[3], bad[11]
	srv.RefuseBatchEntries(marker)
	t.Cleanup(func() { srv.RefuseBatchEntries("") })

	got, err := pub.Publish(t.Context(), evs)
	require.Error(t, err)
	require.ErrorContains(t, err, "event 4 refused")
	require.ErrorContains(t, err, "event 12 refused")
	require.Equal(t, []int64{1, 2, 3, 5, 6, 7, 8, 9, 10, 11}, got)
	n, ok := sqstest.Queue(cfg.Topology().Send)
	require.True(t, ok)
	require.Equal(t, 10, n, "messages stored")

	srv.RefuseBatchEntries("")
	got, err = pub.Publish(t.Context(), []notify.Event{evs[3], evs[11]})
	require.NoError(t, err)
	require.Equal(t, []int64{4, 12}, got)
}

// TestNotHeralds: a message without herald's attributes is dead-lettered
// with the reason and never reaches the handler.
func TestNotHeralds(t *testing.T) {
	cfg := config(t)
	_, err := newPublisher(t, cfg).Publish(t.Context(), testEvents(1, ""))
	require.NoError(t, err)
	c, url := rawClient(t, cfg)
	_, err = c.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("hello")})
	require.NoError(t, err)

	var handled atomic.Int64
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		handled.Add(1)
		assert.NoError(t, d.Ack(ctx))
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		dls := peek(t, cfg)
		require.Len(c, dls, 1)
		require.Contains(c, dls[0].Reason, "not a herald message")
	}, wait, tick)
	require.Eventually(t, func() bool { n, _ := sqstest.Queue(cfg.Topology().Send); return n == 0 }, wait, tick)
	require.Equal(t, int64(1), handled.Load(), "handled")
}

// TestQueueDeletedMidRun: the queues deleted under a running publisher and
// consumer are declared again; the publish that found them gone fails
// (its rows stay for the relay's next pass), and the next one is received.
func TestQueueDeletedMidRun(t *testing.T) {
	cfg := config(t)
	pub := newPublisher(t, cfg)
	var got sync.Map
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		if assert.NoError(t, d.Ack(ctx)) {
			got.Store(d.Message().ID, true)
		}
	})
	evs := testEvents(2, "")
	_, err := pub.Publish(t.Context(), evs[:1])
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := got.Load(int64(1)); return ok }, wait, tick)

	require.NoError(t, sqstr.Delete(t.Context(), cfg))
	require.Eventually(t, func() bool {
		ids, err := pub.Publish(t.Context(), evs[1:])
		return err == nil && len(ids) == 1
	}, wait, 100*time.Millisecond, "the publisher never declared the queue again")
	require.Eventually(t, func() bool { _, ok := got.Load(int64(2)); return ok }, wait, tick,
		"the consumer never received from the declared queue")
}

// TestLongDelayHops: a retry copy with part of its delay still to hold is
// sent again, delayed, and delivered only once that part passed, with its
// retry count and reason kept.
func TestLongDelayHops(t *testing.T) {
	cfg := config(t)
	// Declare the queues, then put a copy as a first hop would leave it.
	require.NoError(t, sqstr.Pinger{Config: withQueues(t, cfg)}.Ping(t.Context()))
	c, url := rawClient(t, cfg)
	ev := testEvents(1, "")[0]
	_, err := c.SendMessage(t.Context(), &awssqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(string(ev.Payload)),
		MessageAttributes: map[string]types.MessageAttributeValue{
			sqstr.AttrMessageID:  {DataType: aws.String("Number"), StringValue: aws.String("1")},
			sqstr.AttrType:       {DataType: aws.String("String"), StringValue: aws.String(ev.Type)},
			sqstr.AttrRetryCount: {DataType: aws.String("Number"), StringValue: aws.String("3")},
			sqstr.AttrLastError:  {DataType: aws.String("String"), StringValue: aws.String("451 later")},
			sqstr.AttrHold:       {DataType: aws.String("Number"), StringValue: aws.String("1500")},
		},
	})
	require.NoError(t, err)
	sent := time.Now()

	var at atomic.Int64
	var retries atomic.Int64
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		retries.Store(int64(d.Message().RetryCount))
		at.Store(int64(time.Since(sent)))
		assert.NoError(t, d.Ack(ctx))
	})
	require.Eventually(t, func() bool { return at.Load() != 0 }, wait, tick)
	require.GreaterOrEqual(t, time.Duration(at.Load()), 1500*time.Millisecond, "delivered before its hold")
	require.Equal(t, int64(3), retries.Load())
}

// withQueues declares cfg's queues and returns cfg.
func withQueues(t *testing.T, cfg sqstr.Config) sqstr.Config {
	t.Helper()
	_, err := sqstr.PeekDeadLetters(t.Context(), cfg)
	require.NoError(t, err)
	return cfg
}

// TestVisibilityExtended: a handler that runs three times the visibility
// timeout keeps its message; another consumer never receives it.
func TestVisibilityExtended(t *testing.T) {
	cfg := config(t)
	cfg.VisibilityTimeout = time.Second
	_, err := newPublisher(t, cfg).Publish(t.Context(), testEvents(1, ""))
	require.NoError(t, err)

	var deliveries atomic.Int64
	var acked atomic.Bool
	handle := func(ctx context.Context, d notify.Delivery) {
		if deliveries.Add(1) == 1 {
			// A slow send: held well past the visibility timeout. The
			// timer is the send's duration, not a synchronisation.
			select {
			case <-time.After(3 * cfg.VisibilityTimeout):
			case <-ctx.Done():
			}
		}
		if assert.NoError(t, d.Ack(ctx)) {
			acked.Store(true)
		}
	}
	consume(t, cfg, handle)
	consume(t, cfg, handle)
	require.Eventually(t, acked.Load, wait, tick)
	require.Never(t, func() bool { return deliveries.Load() > 1 }, 2*cfg.VisibilityTimeout, tick)
}

// TestWrongEndpoint: an endpoint nobody listens on gives an error that
// names it and the queue, and holds no secret.
func TestWrongEndpoint(t *testing.T) {
	sqstest.Start(t) // the test credentials in the environment
	cfg, err := sqstr.ParseURL("sqs://us-east-1/nobody?endpoint=http://127.0.0.1:1")
	require.NoError(t, err)
	p, err := sqstr.NewPublisher(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err = p.Publish(ctx, testEvents(1, ""))
	require.Error(t, err)
	require.ErrorContains(t, err, "endpoint http://127.0.0.1:1")
	require.ErrorContains(t, err, "nobody-send")
	require.NotContains(t, err.Error(), "herald-test-secret")
}

// TestReceiveAnswerLost: the connection drops in the middle of the answer
// to a receive that took a message. SQS counts it received; the Consumer
// never saw its receipt handle. It comes back after the visibility timeout
// and is handled then: delayed, not lost, and handled once.
func TestReceiveAnswerLost(t *testing.T) {
	cfg := config(t)
	cfg.VisibilityTimeout = time.Second
	_, err := newPublisher(t, cfg).Publish(t.Context(), testEvents(1, ""))
	require.NoError(t, err)

	cut := &cutFirstReceive{target: cfg.Endpoint}
	front := httptest.NewServer(cut)
	t.Cleanup(front.Close)
	var logs testlog.Buffer
	ccfg := cfg
	ccfg.Endpoint = front.URL
	ccfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))

	var handled atomic.Int64
	var handledAt atomic.Int64
	consume(t, ccfg, func(ctx context.Context, d notify.Delivery) {
		handled.Add(1)
		handledAt.Store(time.Now().UnixNano())
		assert.NoError(t, d.Ack(ctx))
	})
	require.Eventually(t, func() bool { return handled.Load() == 1 }, wait, tick, "the message whose receive answer was lost never came back")
	require.True(t, cut.cut.Load(), "no receive answer was cut")
	require.Contains(t, logs.String(), "sqs receive failed")
	// It came back after its visibility timeout: SQS started it when it
	// answered the receive, after the proxy forwarded it.
	require.GreaterOrEqual(t, time.Duration(handledAt.Load()-cut.at.Load()), cfg.VisibilityTimeout)
	require.Never(t, func() bool { return handled.Load() > 1 }, 2*cfg.VisibilityTimeout, tick)
}

// cutFirstReceive forwards every request to goaws, except that it drops
// the connection half-way through the first receive answer that carries a
// message.
type cutFirstReceive struct {
	target string
	cut    atomic.Bool
	at     atomic.Int64 // UnixNano when the cut receive was forwarded
}

func (p *cutFirstReceive) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	forwarded := time.Now()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	form, _ := url.ParseQuery(string(body))
	if form.Get("Action") == "ReceiveMessage" && bytes.Contains(answer, []byte("<ReceiptHandle>")) && p.cut.CompareAndSwap(false, true) {
		p.at.Store(forwarded.UnixNano())
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: %d\r\n\r\n", len(answer))
		_, _ = buf.Write(answer[:len(answer)/2])
		_ = buf.Flush()
		_ = conn.Close()
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}
