package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
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
	// AttrPriority holds the notification's priority (issue 34, point
	// 5) when it is not normal, high or bulk; copies keep it. SQS gives
	// no order to rely on: the relay's claim sends high events first, and
	// the worker reads the attribute.
	AttrPriority = "herald-priority"
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
	receives int
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
		q.send, q.dlq, q.status, q.receives, q.declared = u.send, u.dlq, u.status, u.maxReceiveCount, true
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

// maxReceiveCount is the send queue's redrive policy as found when urls
// declared the queues: the configuration's, unless the queue existed with
// another (see declare).
func (q *queues) maxReceiveCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.receives == 0 {
		return q.cfg.MaxReceiveCount
	}
	return q.receives
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

// queueURLs are the URLs of a topology's queues, and the send queue's
// redrive policy's maxReceiveCount as found (0: it has none).
type queueURLs struct {
	send, dlq, status string
	maxReceiveCount   int
}

// declare creates the queues if they are missing and returns their URLs.
//
// Every herald process declares the same queues, so it declares only what
// every process agrees on: the attributes below are constants, or derived
// from the broker URL (FIFO) and from Config.MaxReceiveCount, which no
// setting changes (every process has DefaultMaxReceiveCount). Nothing that
// one process's settings decide is declared: the visibility timeout, which
// follows the send timeouts, is given by each receive (ReceiveMessage's
// VisibilityTimeout) and kept up while a send runs
// (ChangeMessageVisibility, see Consumer), so a relay and a worker, or two
// workers, with different send timeouts share the queues.
//
//   - PREFIX-send-dlq and PREFIX-status: MessageRetentionPeriod 14 days,
//     FifoQueue with fifo=true.
//   - PREFIX-send: the same, and a RedrivePolicy to PREFIX-send-dlq with
//     maxReceiveCount Config.MaxReceiveCount.
//
// CreateQueue returns a queue that exists with these attributes as it is.
// One that exists with others (an operator changed them, or an older
// herald declared a VisibilityTimeout) is refused by SQS
// (QueueAlreadyExists); herald then reads what the queue has and uses it as
// it is (see adoptRedrive): it logs each difference once, takes the queue's
// maxReceiveCount for its FIFO parks, and refuses to start only when the
// queue cannot work for it (a FIFO maxReceiveCount below 4), with an error
// that names the attribute and the fix.
func declare(ctx context.Context, c *awssqs.Client, cfg Config) (queueURLs, error) {
	topo := cfg.Topology()
	base := map[string]string{"MessageRetentionPeriod": strconv.Itoa(retention)}
	if topo.FIFO {
		base["FifoQueue"] = "true"
	}
	dlq, err := ensure(ctx, c, cfg, topo.DeadLetter, base, []types.QueueAttributeName{types.QueueAttributeNameQueueArn})
	if err != nil {
		return queueURLs{}, err
	}
	arn := dlq.attrs[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		return queueURLs{}, fmt.Errorf("sqs: queue %s at %s has no ARN", topo.DeadLetter, cfg.where())
	}
	sendAttrs := maps.Clone(base)
	sendAttrs["RedrivePolicy"] = redrivePolicy(arn, cfg.MaxReceiveCount)
	send, err := ensure(ctx, c, cfg, topo.Send, sendAttrs, nil)
	if err != nil {
		return queueURLs{}, err
	}
	receives := cfg.MaxReceiveCount
	if send.existed {
		if receives, err = adoptRedrive(cfg, topo, send.attrs); err != nil {
			return queueURLs{}, err
		}
	}
	status, err := ensure(ctx, c, cfg, topo.Status, base, nil)
	if err != nil {
		return queueURLs{}, err
	}
	return queueURLs{send: send.url, dlq: dlq.url, status: status.url, maxReceiveCount: receives}, nil
}

// redrivePolicy is the send queue's RedrivePolicy: herald's DLQ after
// maxReceiveCount receipts. Its spelling is the same in every process.
func redrivePolicy(dlqARN string, maxReceiveCount int) string {
	b, _ := json.Marshal(map[string]string{
		"deadLetterTargetArn": dlqARN,
		"maxReceiveCount":     strconv.Itoa(maxReceiveCount),
	})
	return string(b)
}

// declared is one queue as ensure found or made it.
type declared struct {
	url string
	// attrs holds what was asked for (need), read from the queue; and when
	// the queue existed with other attributes, all of them.
	attrs map[string]string
	// existed says the queue existed with attributes other than herald's.
	existed bool
}

// ensure creates the queue name with attrs, or finds it when it exists
// with other attributes (see declare), logging each of those once. It
// reads the attributes need names (and all of them when the queue
// existed with others).
func ensure(ctx context.Context, c *awssqs.Client, cfg Config, name string, attrs map[string]string, need []types.QueueAttributeName) (declared, error) {
	var d declared
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	switch {
	case err == nil:
		d.url = aws.ToString(out.QueueUrl)
	case isQueueExists(err):
		u, gerr := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if gerr != nil {
			return d, fmt.Errorf("sqs: queue %s at %s exists with other attributes than herald's, and finding it failed: %w", name, cfg.where(), gerr)
		}
		d.url, d.existed = aws.ToString(u.QueueUrl), true
		need = []types.QueueAttributeName{types.QueueAttributeNameAll}
	default:
		return d, fmt.Errorf("sqs: create queue %s at %s: %w", name, cfg.where(), err)
	}
	if len(need) == 0 {
		return d, nil
	}
	ga, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(d.url), AttributeNames: need})
	if err != nil {
		return d, fmt.Errorf("sqs: read the attributes of queue %s at %s: %w", name, cfg.where(), err)
	}
	d.attrs = ga.Attributes
	if d.existed {
		if v, ok := d.attrs["MessageRetentionPeriod"]; ok && v != attrs["MessageRetentionPeriod"] {
			note(cfg, slog.LevelInfo, name, "MessageRetentionPeriod", attrs["MessageRetentionPeriod"], v,
				"SQS drops a message left in the queue longer than that (seconds)")
		}
	}
	return d, nil
}

// adoptRedrive reads the RedrivePolicy of a send queue that existed with
// other attributes and returns the maxReceiveCount herald goes by (0: the
// queue has none). It logs what differs from herald's, and refuses a
// FIFO queue whose count leaves no room for parks.
func adoptRedrive(cfg Config, topo Topology, attrs map[string]string) (int, error) {
	want := fmt.Sprintf("deadLetterTargetArn=<%s>, maxReceiveCount=%d", topo.DeadLetter, cfg.MaxReceiveCount)
	raw := attrs["RedrivePolicy"]
	if raw == "" {
		note(cfg, slog.LevelWarn, topo.Send, "RedrivePolicy", want, "none",
			"no backstop: a message whose every receive fails (a crashing worker) is received for ever; herald's own retry count still dead-letters what its workers handle")
		return 0, nil
	}
	var p struct {
		Target string          `json:"deadLetterTargetArn"`
		Count  json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return 0, notify.Permanent(fmt.Errorf("sqs: queue %s at %s has a RedrivePolicy herald cannot read (%q): %w", topo.Send, cfg.where(), raw, err))
	}
	// SQS writes the count as a number, herald (and some tools) as a
	// string.
	n, err := strconv.Atoi(strings.Trim(string(p.Count), `"`))
	if err != nil || n < 1 {
		return 0, notify.Permanent(fmt.Errorf("sqs: queue %s at %s has a RedrivePolicy with no valid maxReceiveCount (%q)", topo.Send, cfg.where(), raw))
	}
	if target := p.Target[strings.LastIndex(p.Target, ":")+1:]; target != topo.DeadLetter {
		note(cfg, slog.LevelWarn, topo.Send, "RedrivePolicy deadLetterTargetArn", topo.DeadLetter, p.Target,
			"what SQS moves after maxReceiveCount receipts goes there, where herald dlq does not look; herald's own dead letters still go to "+topo.DeadLetter)
	}
	if topo.FIFO && n < minFIFOReceiveCount {
		return 0, notify.Permanent(fmt.Errorf(
			"sqs: queue %s at %s has RedrivePolicy maxReceiveCount %d; on a FIFO queue herald needs at least %d (a park or a retry delay waits by visibility, and each wait costs a receipt): "+
				"raise it (aws sqs set-queue-attributes, RedrivePolicy maxReceiveCount %d as herald declares it) or delete the queue for herald to declare it",
			topo.Send, cfg.where(), n, minFIFOReceiveCount, cfg.MaxReceiveCount))
	}
	if n != cfg.MaxReceiveCount {
		note(cfg, slog.LevelInfo, topo.Send, "RedrivePolicy maxReceiveCount", strconv.Itoa(cfg.MaxReceiveCount), strconv.Itoa(n),
			"herald goes by the queue's count (a FIFO park stays within half of it)")
	}
	return n, nil
}

// noted remembers the differences already logged, so that the processes
// of one binary (a start-up check, a relay, a worker) log each once.
var noted sync.Map

// note logs, once per process, that queue's attribute is not what herald
// declares.
func note(cfg Config, level slog.Level, queue, attribute, herald, found, consequence string) {
	key := strings.Join([]string{cfg.where(), queue, attribute, found}, "\x00")
	if _, seen := noted.LoadOrStore(key, true); seen {
		return
	}
	cfg.Logger.Log(context.Background(), level, "sqs: queue exists with another "+attribute+" than herald declares; using it as it is",
		"queue", queue, "attribute", attribute, "herald", herald, "queue_has", found, "consequence", consequence)
}

// isQueueExists reports whether err is CreateQueue's refusal of a name
// that exists with other attributes (QueueAlreadyExists in SQS's Query
// protocol, QueueNameExists in its JSON one).
func isQueueExists(err error) bool {
	return isAPIError[*types.QueueNameExists](err, "QueueAlreadyExists", "QueueNameExists")
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// isMissingQueue reports whether err says the queue does not exist.
func isMissingQueue(err error) bool {
	return isAPIError[*types.QueueDoesNotExist](err, "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue")
}

// isAPIError reports whether err is the SDK's typed error T or carries one
// of codes: SQS names the same error differently in its protocols, and the
// SDK types only the name it knows.
func isAPIError[T error](err error, codes ...string) bool {
	var typed T
	if errors.As(err, &typed) {
		return true
	}
	var api interface{ ErrorCode() string }
	return errors.As(err, &api) && slices.Contains(codes, api.ErrorCode())
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
// start (publishers and consumers again on first use). Queues that exist
// with other attributes are used as they are (see declare); one herald
// cannot work with fails marked notify.Permanent, naming the attribute and
// the fix. Any other error (SQS unreachable) may pass.
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
