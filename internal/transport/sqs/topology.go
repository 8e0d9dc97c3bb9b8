package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/heraldhq/herald/internal/notify"
)

// The message attributes of the public contract.
const (
	// AttrMessageID holds the outbox id: the message id of herald's
	// deduplication (processed_messages).
	AttrMessageID = "herald-message-id"
	// AttrRetryCount holds how many retries came before this copy.
	AttrRetryCount = "x-retry-count"
	// AttrLastError holds the reason of the last retry or of the dead
	// letter.
	AttrLastError = "x-last-error"
	// AttrType holds the event type (notification.requested,
	// notification.sent, notification.failed).
	AttrType = "herald-type"
	// AttrOccurredAt holds when the event was written, in Unix
	// microseconds.
	AttrOccurredAt = "herald-occurred-at"
	// AttrPublishedAt holds when the relay published the event, in Unix
	// microseconds: the start of its time in the queue
	// (herald_broker_wait_seconds, measured on first deliveries only).
	// Copies do not carry it.
	AttrPublishedAt = "herald-published-at"
	// AttrTraceparent holds the W3C trace context of the event's publish
	// span; retry and dead-letter copies keep it.
	AttrTraceparent = "traceparent"
	// AttrHold holds, on a retry copy, how much of its delay (in
	// milliseconds) is still to wait when it arrives: SQS delays a message
	// at most 15 minutes, so a longer delay hops (the copy is sent again,
	// delayed by the rest) and no clock is ever compared with another.
	AttrHold = "x-retry-hold-ms"
)

// Topology is the set of queue names one configuration uses.
type Topology struct {
	// Send is the queue the relay publishes to and the workers receive
	// from: PREFIX-send.
	Send string
	// DeadLetter is where herald's dead letters go (and, as a backstop,
	// SQS's redrive policy): PREFIX-send-dlq.
	DeadLetter string
	// Status takes the status events (notification.sent,
	// notification.failed) for another service; no herald process
	// receives from it: PREFIX-status.
	Status string
	// FIFO says all three are FIFO queues (their names end in ".fifo").
	FIFO bool
}

// NewTopology returns the queue names for prefix.
func NewTopology(prefix string, fifo bool) Topology {
	t := Topology{Send: prefix + "-send", DeadLetter: prefix + "-send-dlq", Status: prefix + "-status", FIFO: fifo}
	if fifo {
		t.Send += ".fifo"
		t.DeadLetter += ".fifo"
		t.Status += ".fifo"
	}
	return t
}

// validName reports whether SQS accepts name as a queue name.
func validName(name string) bool {
	base := name
	if len(base) > 5 && base[len(base)-5:] == ".fifo" {
		base = base[:len(base)-5]
	}
	if base == "" || len(name) > 80 {
		return false
	}
	for _, r := range base {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// queues holds a client and the URLs of the topology's queues, declared on
// first use and again after SQS said a queue does not exist.
type queues struct {
	cfg Config

	mu       sync.Mutex
	client   *awssqs.Client
	send     string
	dlq      string
	status   string
	declared bool
}

// urls declares the queues if they were not declared yet and returns the
// client and their URLs.
func (q *queues) urls(ctx context.Context) (*awssqs.Client, string, string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.client == nil {
		c, err := q.cfg.client(ctx)
		if err != nil {
			return nil, "", "", err
		}
		q.client = c
	}
	if !q.declared {
		u, err := declare(ctx, q.client, q.cfg)
		if err != nil {
			return nil, "", "", err
		}
		q.send, q.dlq, q.status, q.declared = u.send, u.dlq, u.status, true
	}
	return q.client, q.send, q.dlq, nil
}

// statusURL is the status queue's URL, known once urls declared the
// queues.
func (q *queues) statusURL() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.status
}

// forget makes the next urls declare the queues again.
func (q *queues) forget() {
	q.mu.Lock()
	q.declared = false
	q.mu.Unlock()
}

// retention is every queue's message retention: the longest SQS keeps. It
// is also what bounds the status queue when nobody receives from it.
const retention = 14 * 24 * 3600

// queueURLs are the URLs of a topology's queues.
type queueURLs struct{ send, dlq, status string }

// declare creates the queues if they are missing (CreateQueue returns an
// existing queue with the same attributes as it is) and returns their URLs.
func declare(ctx context.Context, c *awssqs.Client, cfg Config) (queueURLs, error) {
	send, dlq, err := declareWork(ctx, c, cfg)
	if err != nil {
		return queueURLs{}, err
	}
	status, err := declareStatus(ctx, c, cfg)
	if err != nil {
		return queueURLs{}, err
	}
	return queueURLs{send: send, dlq: dlq, status: status}, nil
}

// declareStatus creates the status queue if it is missing: the retention
// of the others, SQS's default visibility timeout (the receiving
// service's to choose per receive), no redrive policy (dead letters of
// another service's reading are that service's).
func declareStatus(ctx context.Context, c *awssqs.Client, cfg Config) (string, error) {
	topo := cfg.Topology()
	attrs := map[string]string{"MessageRetentionPeriod": strconv.Itoa(retention)}
	if topo.FIFO {
		attrs["FifoQueue"] = "true"
	}
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(topo.Status), Attributes: attrs})
	if err != nil {
		var exists *types.QueueNameExists
		if errors.As(err, &exists) {
			return "", notify.Permanent(fmt.Errorf("sqs: queue %s at %s exists with other attributes (message retention): %w", topo.Status, cfg.where(), err))
		}
		return "", fmt.Errorf("sqs: create queue %s at %s: %w", topo.Status, cfg.where(), err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// declareWork creates the send queue and its dead-letter queue.
func declareWork(ctx context.Context, c *awssqs.Client, cfg Config) (send, dlq string, err error) {
	topo := cfg.Topology()
	attrs := map[string]string{"MessageRetentionPeriod": strconv.Itoa(retention)}
	if topo.FIFO {
		attrs["FifoQueue"] = "true"
	}
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(topo.DeadLetter), Attributes: attrs})
	if err != nil {
		return "", "", fmt.Errorf("sqs: create queue %s at %s: %w", topo.DeadLetter, cfg.where(), err)
	}
	dlq = aws.ToString(out.QueueUrl)
	ga, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(dlq), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", "", fmt.Errorf("sqs: read the ARN of queue %s at %s: %w", topo.DeadLetter, cfg.where(), err)
	}
	arn := ga.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", "", fmt.Errorf("sqs: queue %s at %s has no ARN", topo.DeadLetter, cfg.where())
	}
	policy, _ := json.Marshal(map[string]string{
		"deadLetterTargetArn": arn,
		"maxReceiveCount":     strconv.Itoa(cfg.MaxReceiveCount),
	})
	sendAttrs := map[string]string{
		"MessageRetentionPeriod": strconv.Itoa(retention),
		"VisibilityTimeout":      strconv.Itoa(seconds(cfg.VisibilityTimeout)),
		"RedrivePolicy":          string(policy),
	}
	if topo.FIFO {
		sendAttrs["FifoQueue"] = "true"
	}
	out, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(topo.Send), Attributes: sendAttrs})
	if err != nil {
		var exists *types.QueueNameExists
		if errors.As(err, &exists) {
			// Retrying cannot help: the relay stops with this (see
			// relay.Publisher), an operator has to align or delete it.
			return "", "", notify.Permanent(fmt.Errorf("sqs: queue %s at %s exists with other attributes (visibility timeout, redrive policy): %w", topo.Send, cfg.where(), err))
		}
		return "", "", fmt.Errorf("sqs: create queue %s at %s: %w", topo.Send, cfg.where(), err)
	}
	return aws.ToString(out.QueueUrl), dlq, nil
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// isMissingQueue reports whether err says the queue does not exist.
func isMissingQueue(err error) bool {
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return true
	}
	var api interface{ ErrorCode() string }
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue":
			return true
		}
	}
	return false
}

// Delete removes the topology's queues, the status queue too (bench's
// scratch queues, tests).
func Delete(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	c, err := cfg.client(ctx)
	if err != nil {
		return err
	}
	topo := cfg.Topology()
	var errs []error
	for _, name := range []string{topo.Send, topo.DeadLetter, topo.Status} {
		u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			if !isMissingQueue(err) {
				errs = append(errs, fmt.Errorf("sqs: find queue %s: %w", name, err))
			}
			continue
		}
		if _, err := c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: u.QueueUrl}); err != nil && !isMissingQueue(err) {
			errs = append(errs, fmt.Errorf("sqs: delete queue %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// DeclareQueues creates cfg's queues when missing, as every process does at
// start (publishers and consumers again on first use). A send queue that
// exists with other attributes fails marked notify.Permanent; any other
// error (SQS unreachable) may pass.
func DeclareQueues(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	c, err := cfg.client(ctx)
	if err != nil {
		return err
	}
	_, err = declare(ctx, c, cfg)
	return err
}
