package sqs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/heraldhq/herald/internal/transport/consume"
)

// DefaultPrefix is the queue-name prefix of an sqs:// URL without a path.
const DefaultPrefix = "notifications"

// DefaultVisibilityTimeout is Config.VisibilityTimeout's default.
const DefaultVisibilityTimeout = 5 * time.Minute

// DefaultMaxReceiveCount is Config.MaxReceiveCount's default: the redrive
// policy's backstop, far above any retry count herald itself would spend.
const DefaultMaxReceiveCount = 1000

// minFIFOReceiveCount is the smallest MaxReceiveCount a FIFO Consumer
// takes.
const minFIFOReceiveCount = 4

// maxDelay is the longest DelaySeconds SQS accepts on a message (15
// minutes); a longer retry delay hops (see Consumer).
const maxDelay = 900 * time.Second

// maxVisibility is the longest visibility timeout SQS accepts (12 hours).
const maxVisibility = 12 * time.Hour

// Config configures a Publisher, a Consumer or the dead-letter tools. Every
// field whose zero is meaningless gets a default; the others are honoured
// as given.
type Config struct {
	// Region is the AWS region (us-east-1). Required.
	Region string
	// Settings are the settings every broker shares, with the same
	// defaults (see consume.Settings), but for Prefix. Here Prefix names the
	// queues, Prefix-send, Prefix-send-dlq and Prefix-status (with ".fifo"
	// appended when FIFO), and defaults to DefaultPrefix; SQS delays whole
	// seconds, so a retry delay is rounded up to the next second;
	// ReconnectMin is the first wait after a failed receive.
	consume.Settings
	// Endpoint, when set, replaces the region's endpoint (a local
	// SQS-compatible server: http://127.0.0.1:4100). Default: the region's.
	Endpoint string
	// FIFO uses FIFO queues: MessageGroupId is the notification's user_id
	// (per-user order), MessageDeduplicationId the outbox id (a relay's
	// re-publish within SQS's five minutes is stored once).
	FIFO bool
	// VisibilityTimeout is how long a message this Consumer received stays
	// invisible to the other consumers. Each receive asks for it
	// (ReceiveMessage's VisibilityTimeout) and the Consumer extends it
	// (ChangeMessageVisibility) every third of it while the handler runs,
	// so it only bounds how late a message held by a crashed worker comes
	// back; it must be longer than the worker's claim lease so that a
	// worker that stopped extending (a wedged network) loses the message
	// only after its claim expired. It is never declared on the queue:
	// processes with different send timeouts (and so different visibility
	// timeouts) share the queues. Whole seconds, at most 12h. Zero means
	// the default. Default 5m.
	VisibilityTimeout time.Duration
	// WaitTime is the long poll of each ReceiveMessage (at most 20s). A
	// stopping Consumer lets its last receive finish (see Consume), so it
	// also bounds a stop. Zero means the default. Default 5s.
	WaitTime time.Duration
	// MaxReceiveCount is the redrive policy of the send queue: a message
	// received this often without being deleted goes to the DLQ by SQS's
	// own hand. It is a backstop only (herald dead-letters on its own
	// count), so it is far above the retries. On FIFO queues, where a
	// parked message waits by its visibility, half of it bounds how often
	// one message is parked in place before it is sent again as a copy;
	// at least 4 there. It is declared on the send queue, so every process
	// on the same queues must have the same (no setting changes it: herald
	// always has the default); a send queue that exists with another count
	// keeps it, and herald goes by the queue's (see DeclareQueues). Zero
	// means the default. Default DefaultMaxReceiveCount.
	MaxReceiveCount int
	// Client, when set, is used instead of a client built from the SDK's
	// default chain (environment, shared files, the instance's role). For
	// tests and tools; Region and Endpoint are then not used.
	Client *awssqs.Client
}

// ParseURL reads sqs://REGION/PREFIX[?endpoint=URL&fifo=true]. It never
// quotes the URL in an error: credentials come from the SDK's chain, but a
// mistyped URL may still hold one.
func ParseURL(s string) (Config, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "sqs" {
		return Config{}, errors.New("sqs: the broker URL must be sqs://REGION/QUEUE-PREFIX[?endpoint=URL&fifo=true]")
	}
	if u.User != nil {
		return Config{}, errors.New("sqs: the broker URL must not hold credentials: they come from the AWS SDK's chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, the instance's role)")
	}
	c := Config{Region: u.Host, Settings: consume.Settings{Prefix: strings.Trim(u.Path, "/")}}
	if c.Region == "" {
		return Config{}, errors.New("sqs: the broker URL names no region: sqs://REGION/QUEUE-PREFIX")
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "fifo":
		default:
			return Config{}, fmt.Errorf("sqs: unknown broker URL option %q (known: endpoint, fifo)", k)
		}
	}
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
			return Config{}, errors.New("sqs: the endpoint option must be an http:// or https:// URL")
		}
		c.Endpoint = e
	}
	if f := q.Get("fifo"); f != "" {
		b, err := strconv.ParseBool(f)
		if err != nil {
			return Config{}, fmt.Errorf("sqs: fifo must be true or false, got %q", f)
		}
		c.FIFO = b
	}
	return c, nil
}

func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.Settings = c.Settings.WithDefaults()
	c.VisibilityTimeout = cmp.Or(c.VisibilityTimeout, DefaultVisibilityTimeout)
	c.WaitTime = cmp.Or(c.WaitTime, 5*time.Second)
	c.MaxReceiveCount = cmp.Or(c.MaxReceiveCount, DefaultMaxReceiveCount)
	return c
}

func (c Config) validate() error {
	if err := c.Settings.Validate("sqs"); err != nil {
		return err
	}
	switch {
	case c.Client == nil && strings.TrimSpace(c.Region) == "":
		return errors.New("sqs: region is required")
	case !validName(c.Topology().DeadLetter):
		return fmt.Errorf("sqs: queue prefix %q makes an invalid queue name (letters, digits, - and _, at most 80 characters with the suffix)", c.Prefix)
	case c.VisibilityTimeout < time.Second || c.VisibilityTimeout > maxVisibility:
		return fmt.Errorf("sqs: visibility timeout must be between 1s and 12h, got %s", c.VisibilityTimeout)
	case c.WaitTime < 0 || c.WaitTime > 20*time.Second:
		return fmt.Errorf("sqs: receive wait time must be between 0 and 20s, got %s", c.WaitTime)
	case c.MaxReceiveCount < 1 || c.MaxReceiveCount > 1000:
		return fmt.Errorf("sqs: max receive count must be between 1 and 1000, got %d", c.MaxReceiveCount)
	case c.FIFO && c.MaxReceiveCount < minFIFOReceiveCount:
		// A FIFO message waits (a retry's delay, a park) by its
		// visibility, and each wait costs a receipt: below this, no wait
		// would stay within half of the count (see Consumer.mayWait).
		return fmt.Errorf("sqs: on FIFO queues the max receive count must be at least %d (parks and retry delays wait by visibility, which counts receipts), got %d", minFIFOReceiveCount, c.MaxReceiveCount)
	}
	return nil
}

// retryDelay is the wait before retry n (n >= 1).
func (c Config) retryDelay(n int) time.Duration {
	return c.RetryDelays[min(max(n, 1), len(c.RetryDelays))-1]
}

// Topology returns the queue names the configuration uses.
func (c Config) Topology() Topology {
	p := c.Prefix
	if p == "" {
		p = DefaultPrefix
	}
	return NewTopology(p, c.FIFO)
}

// where names the server for error messages: the endpoint override, or the
// region. Neither holds a secret.
func (c Config) where() string {
	if c.Endpoint != "" {
		return "endpoint " + c.Endpoint
	}
	if c.Client != nil {
		return "the given client"
	}
	return "region " + c.Region
}

// NewClient returns the SQS client the configuration names (herald
// bench's raw ceiling sends with it).
func (c Config) NewClient(ctx context.Context) (*awssqs.Client, error) { return c.client(ctx) }

// client returns the SQS client: Config.Client, or one from the SDK's
// default chain (credentials are never read or logged here).
func (c Config) client(ctx context.Context) (*awssqs.Client, error) {
	if c.Client != nil {
		return c.Client, nil
	}
	ac, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(c.Region))
	if err != nil {
		return nil, fmt.Errorf("sqs: load AWS configuration: %w", err)
	}
	endpoint := c.Endpoint
	return awssqs.NewFromConfig(ac, func(o *awssqs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}
