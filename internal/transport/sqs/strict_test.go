package sqs_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
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
	"github.com/heraldhq/herald/internal/testkit/transporttest"
	sqstr "github.com/heraldhq/herald/internal/transport/sqs"
)

// The tests in this file run on local-aws-sqs (sqstest.StartStrict), which
// refuses a CreateQueue whose attributes differ from the queue's and
// honours each receive's visibility timeout, as SQS does; goaws does
// neither.

// strictConfig returns a configuration on queues of the test's own on srv;
// its queues are deleted when the test ends.
func strictConfig(t *testing.T, srv *sqstest.Strict, fifo bool) sqstr.Config {
	t.Helper()
	cfg, err := sqstr.ParseURL(srv.BrokerURL(sqstest.Prefix(t), fifo))
	require.NoError(t, err)
	cfg.WaitTime = time.Second
	cfg.ReconnectMin = 20 * time.Millisecond
	cfg.ReconnectMax = 200 * time.Millisecond
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, sqstr.Delete(ctx, cfg))
	})
	return cfg
}

// TestConformanceStrict runs the seam suite on local-aws-sqs, on standard
// queues, one emulator for the suite. Every subtest runs: the emulator's
// gaps (see sqstest.StartStrict) touch none of them, its long poll being
// made SQS's by the launcher. The tests on local-aws-sqs run in parallel
// with each other, after the package's others.
func TestConformanceStrict(t *testing.T) {
	t.Parallel()
	srv := sqstest.StartStrict(t)
	transporttest.Run(t, harness(func(t *testing.T) sqstr.Config { return strictConfig(t, srv, false) }))
}

// TestConformanceStrictFIFO runs the suite on local-aws-sqs's FIFO queues,
// those of its subtests whose outcome rests on SQS's own accounting, which
// goaws has only through sqstest's shim: a receive's visibility timeout
// and its receipts (a FIFO retry, release or park waits by visibility, in
// place). The others (Ack, DeadLetter, NothingLostAcrossRestart) run on
// FIFO queues on goaws only (TestConformanceFIFO), and on local-aws-sqs's
// standard queues above, to keep the package's time down. The emulator locks no group, but every event of the suite is another
// user's; per-user order is TestFIFOGroupOrder's, on goaws.
func TestConformanceStrictFIFO(t *testing.T) {
	t.Parallel()
	srv := sqstest.StartStrict(t)
	h := harness(func(t *testing.T) sqstr.Config { return strictConfig(t, srv, true) })
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		t.Helper()
		switch t.Name()[strings.LastIndex(t.Name(), "/")+1:] {
		case "RedeliveryAfterCrash", "Retry", "Release", "Park":
			return h(t)
		}
		t.Skip("time: on FIFO queues this subtest runs on goaws (TestConformanceFIFO), on local-aws-sqs on standard queues (TestConformanceStrict)")
		return transporttest.Harness{}
	})
}

// TestSharedQueuesDifferentSendTimeouts: a relay and a worker whose send
// timeouts differ (so do their visibility timeouts: HERALD_SMTP_TIMEOUT
// changed between them, or set for one only) both start on the same
// queues, and a message goes from one to the other. Were the visibility
// timeout declared on the send queue, SQS would refuse the second
// declaration (QueueAlreadyExists) and that process would not start.
func TestSharedQueuesDifferentSendTimeouts(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		name := "standard"
		if fifo {
			name = "fifo"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := sqstest.StartStrict(t)
			relayCfg := strictConfig(t, srv, fifo)
			workerCfg := relayCfg
			relayCfg.VisibilityTimeout = 40 * time.Second
			workerCfg.VisibilityTimeout = 70 * time.Second

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			require.NoError(t, sqstr.DeclareQueues(ctx, relayCfg), "the relay's start-up declaration")
			require.NoError(t, sqstr.DeclareQueues(ctx, workerCfg), "the worker's start-up declaration, with another send timeout")

			evs := testEvents(3, "")
			got, err := newPublisher(t, relayCfg).Publish(ctx, evs)
			require.NoError(t, err)
			require.Equal(t, ids(evs), got)
			var l log
			consume(t, workerCfg, func(ctx context.Context, d notify.Delivery) {
				l.delivered(d.Message())
				if assert.NoError(t, d.Ack(ctx)) {
					l.acked(d.Message().ID)
				}
			})
			require.Eventually(t, func() bool { return l.ackCount() == len(evs) }, wait, tick, "the worker never acknowledged every message")
		})
	}
}

// strictClient is an SQS client of the test's own on cfg's endpoint.
func strictClient(t *testing.T, cfg sqstr.Config) *awssqs.Client {
	t.Helper()
	ac, err := awsconfig.LoadDefaultConfig(t.Context(), awsconfig.WithRegion(cfg.Region))
	require.NoError(t, err)
	return awssqs.NewFromConfig(ac, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(cfg.Endpoint) })
}

// precreate makes cfg's DLQ and send queue as an operator (or an older
// herald) would have: the send queue with sendAttrs and, when
// maxReceiveCount is positive, a redrive policy to the DLQ in SQS's own
// spelling (the count a number).
func precreate(t *testing.T, cfg sqstr.Config, maxReceiveCount int, sendAttrs map[string]string) {
	t.Helper()
	c := strictClient(t, cfg)
	topo := cfg.Topology()
	base := map[string]string{}
	if topo.FIFO {
		base["FifoQueue"] = "true"
	}
	out, err := c.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(topo.DeadLetter), Attributes: base})
	require.NoError(t, err)
	ga, err := c.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{
		QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	require.NoError(t, err)
	attrs := map[string]string{}
	for k, v := range base {
		attrs[k] = v
	}
	for k, v := range sendAttrs {
		attrs[k] = v
	}
	if maxReceiveCount > 0 {
		p, err := json.Marshal(map[string]any{"deadLetterTargetArn": ga.Attributes["QueueArn"], "maxReceiveCount": maxReceiveCount})
		require.NoError(t, err)
		attrs["RedrivePolicy"] = string(p)
	}
	_, err = c.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(topo.Send), Attributes: attrs})
	require.NoError(t, err)
}

// TestExistingQueueKept: a send queue that exists with other attributes
// than herald declares (an older herald's visibility timeout, an
// operator's retention and redrive count) is used as it is: herald starts
// and logs, once, each difference that matters, naming the attribute.
func TestExistingQueueKept(t *testing.T) {
	t.Parallel()
	srv := sqstest.StartStrict(t)
	cfg := strictConfig(t, srv, false)
	precreate(t, cfg, 50, map[string]string{"VisibilityTimeout": "360", "MessageRetentionPeriod": "345600"})
	var out testlog.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&out, nil))

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, sqstr.DeclareQueues(ctx, cfg))
	require.NoError(t, sqstr.DeclareQueues(ctx, cfg))
	logged := out.String()
	require.Equal(t, 1, strings.Count(logged, "queue="+cfg.Topology().Send+" attribute=MessageRetentionPeriod"), "the retention difference, logged once:\n%s", logged)
	require.Contains(t, logged, "queue_has=345600")
	require.Equal(t, 1, strings.Count(logged, `attribute="RedrivePolicy maxReceiveCount"`), "the redrive count difference, logged once:\n%s", logged)
	require.Contains(t, logged, "queue_has=50")
	require.NotContains(t, logged, "VisibilityTimeout", "herald declares no visibility timeout, so it has nothing to say of the queue's")

	evs := testEvents(1, "")
	_, err := newPublisher(t, cfg).Publish(ctx, evs)
	require.NoError(t, err)
	var l log
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		l.delivered(d.Message())
		if assert.NoError(t, d.Ack(ctx)) {
			l.acked(d.Message().ID)
		}
	})
	require.Eventually(t, func() bool { return l.ackCount() == 1 }, wait, tick, "the message was never acknowledged")
}

// TestExistingFIFORedriveHonoured: on a FIFO send queue that exists with a
// redrive policy of 4 receipts, herald goes by the queue's count, not its
// own 1000: a message parked in place again and again (each park costs a
// receipt) is sent on as a copy before SQS would move it to the DLQ.
func TestExistingFIFORedriveHonoured(t *testing.T) {
	t.Parallel()
	srv := sqstest.StartStrict(t)
	cfg := strictConfig(t, srv, true)
	precreate(t, cfg, 4, nil)
	// One at a time: local-aws-sqs's long poll would wait out WaitTime for
	// more than the one message there is.
	cfg.Prefetch = 1
	_, err := newPublisher(t, cfg).Publish(t.Context(), testEvents(1, ""))
	require.NoError(t, err)

	const parks = 6
	var l log
	consume(t, cfg, func(ctx context.Context, d notify.Delivery) {
		if l.delivered(d.Message()) <= parks {
			assert.NoError(t, d.Release(ctx, 0))
			return
		}
		if assert.NoError(t, d.Ack(ctx)) {
			l.acked(d.Message().ID)
		}
	})
	require.Eventually(t, func() bool { return l.ackCount() == 1 }, wait, tick,
		"the parked message was never acknowledged (SQS moved it to the DLQ?)")
	require.Empty(t, peek(t, cfg), "the redrive policy moved a parked message to the DLQ")
}

// TestExistingFIFORedriveTooLow: herald refuses a FIFO send queue whose
// redrive policy leaves no room for a park, with an error that names the
// attribute and the fix, marked permanent (the process stops).
func TestExistingFIFORedriveTooLow(t *testing.T) {
	t.Parallel()
	srv := sqstest.StartStrict(t)
	cfg := strictConfig(t, srv, true)
	precreate(t, cfg, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := sqstr.DeclareQueues(ctx, cfg)
	require.Error(t, err)
	require.True(t, notify.IsPermanent(err), "a queue herald cannot work with stops the process: %v", err)
	require.ErrorContains(t, err, "RedrivePolicy maxReceiveCount 2")
	require.ErrorContains(t, err, "at least 4")
	require.ErrorContains(t, err, "set-queue-attributes")
}
