package kafka

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/consume"
)

// Topic names of the public contract, before Config.Prefix.
const (
	// TopicRequested carries the relay's notification.requested events and
	// the retries that came due.
	TopicRequested = "notifications.requested"
	// TopicRetry holds retry copies until they are due.
	TopicRetry = "notifications.retry"
	// TopicDeadLetters keeps dead letters, each with its last error.
	TopicDeadLetters = "notifications.dlq"
	// TopicStatus carries the status events notification.sent and
	// notification.failed, for other services; no herald worker reads it.
	TopicStatus = "notifications.status"
	// DefaultGroup is the workers' consumer group, before Config.Prefix.
	DefaultGroup = "herald-worker"
)

// Record headers. The message is the one RabbitMQ carries: the outbox id,
// the content type and event type, the retry count and the last error.
const (
	// HeaderMessageID holds the outbox id in decimal.
	HeaderMessageID = "message_id"
	// HeaderContentType holds the payload's media type, application/json.
	HeaderContentType = "content_type"
	// HeaderType holds the event type.
	HeaderType = "type"
	// HeaderRetryCount holds the number of retries before this delivery
	// (absent on the first).
	HeaderRetryCount = "x-retry-count"
	// HeaderLastError holds the reason of the last failure, on retries and
	// dead letters.
	HeaderLastError = "x-last-error"
	// HeaderOccurredAt holds when the event was written, in Unix
	// microseconds.
	HeaderOccurredAt = "x-occurred-at"
	// HeaderPublishedAt holds when the relay published the event, in Unix
	// microseconds: the start of its time in the broker
	// (herald_broker_wait_seconds, measured on first deliveries only).
	HeaderPublishedAt = "x-published-at"
	// HeaderTraceparent holds the W3C trace context of the event's publish
	// span; retry and dead-letter copies keep it.
	HeaderTraceparent = "traceparent"
	// HeaderPriority holds the notification's priority (issue 34, point
	// 5) when it is not normal, high or bulk; copies keep it. A partition
	// is read in order: the relay's claim puts high events first in each
	// batch, and the worker reads the header, but a backlog in a
	// partition is not reordered.
	HeaderPriority = "x-priority"
	// HeaderRetryDelay holds how long a retry copy waits before it goes
	// back to the requested topic, in milliseconds. It is a duration, not
	// a time: the Consumer that reads the copy holds it that long from the
	// moment it read it, by its own clock, so no two machines' clocks are
	// ever compared.
	HeaderRetryDelay = "x-retry-delay-ms"
	// HeaderDueAt held, on retry copies written by herald before
	// x-retry-delay-ms, when the copy was due, in Unix milliseconds of the
	// writer's clock. It is no longer written, and no longer trusted: a
	// copy that carries only it is held the schedule's delay for its retry
	// count (see doc.go). Copies drop it.
	HeaderDueAt = "x-due-at"
	// HeaderSource names where a dead letter was read from
	// (topic/partition@offset): the only trace of a record that is not
	// herald's.
	HeaderSource = "x-source"
)

// finalCommitTimeout bounds a commit made while giving partitions up (the
// last one when Consume's context ends, the one of a revoke): what it could
// not commit is delivered again by the partition's next owner, which is
// safe, whereas waiting longer (a commit waits out a rebalance in
// progress, for as long as the group takes to form) keeps a process from
// stopping.
const finalCommitTimeout = 2 * time.Second

// closeTimeout bounds the client's close, that is leaving the group. A
// leave waits for a rebalance in progress to end; past closeTimeout
// Consume returns without it, and the group hands the partitions over
// once the member's session times out.
const closeTimeout = 2 * time.Second

// The group session of a Consumer (see doc.go, "Membership"): a member
// that sends no heartbeat for groupSessionTimeout is dropped from the group
// and its partitions go to the others. franz-go's default, 45s, kept the
// partitions of a worker killed with SIGKILL assigned to it, their records
// undelivered, for that long. Brokers accept session timeouts between
// group.min.session.timeout.ms (6s by default) and
// group.max.session.timeout.ms (30 minutes); 10s leaves room above the
// minimum, and a heartbeat every second lets a member miss several
// before it is dropped.
const (
	groupSessionTimeout = 10 * time.Second
	groupHeartbeat      = time.Second
)

// Config configures a Publisher or a Consumer. Fields whose zero cannot
// work (no topic has zero partitions, a zero timeout gives up at once) get
// a default; the others are honoured as given.
type Config struct {
	// Brokers are the seed brokers, host:port each. Required.
	Brokers []string
	// User and Password authenticate with SASL when User is set. Default:
	// no authentication.
	User, Password string
	// Mechanism is the SASL mechanism: PLAIN, SCRAM-SHA-256 or
	// SCRAM-SHA-512. Default SCRAM-SHA-512 when User is set (PLAIN sends
	// the password as it is: use it over TLS only).
	Mechanism string
	// TLS, when set, connects with TLS. Default: plain TCP.
	TLS *tls.Config
	// Settings are the settings every broker shares, with the same
	// defaults (see consume.Settings). Here Prefix is prepended to every
	// topic and consumer group name; a zero retry delay retries at once;
	// ReconnectMin and ReconnectMax bound the backoff of a Consumer that
	// cannot reach the cluster at start; ShutdownGrace also bounds the
	// handlers of revoked partitions, and the rest of a stop is bounded too
	// (the final commit by finalCommitTimeout, leaving the group by
	// closeTimeout), so Consume returns within about ShutdownGrace + 4s.
	consume.Settings
	// Group is the consumer group of the Consumers, before Prefix. Default
	// "herald-worker".
	Group string
	// MaxBuffered bounds the records of one topic a Consumer holds, waiting
	// for their key or their due time: past it, fetching that topic pauses.
	// Zero means the default. Default 1000, or the Prefetch when that is
	// larger (it must be at least the Prefetch).
	MaxBuffered int
	// Partitions is the partition count of the topics created when missing.
	// A topic needs one at least, so zero means the default. Default 12.
	Partitions int32
	// ReplicationFactor is the replication factor of the topics created
	// when missing. Zero means the default: 3, or the number of brokers
	// when the cluster has fewer.
	ReplicationFactor int16
	// ConfirmTimeout bounds the wait for the brokers' acknowledgement of a
	// produce (the relay's batch, a retry copy, a dead letter). Zero means
	// the default. Default 15s.
	ConfirmTimeout time.Duration
	// CommitInterval is how often a Consumer commits the offsets whose
	// effect is recorded. Zero means the default. Default 1s.
	CommitInterval time.Duration
	// TopicCheckInterval is how often a Consumer checks that its topics
	// still exist (and recreates a deleted one, with an ERROR log). Zero
	// means the default. Default 30s.
	TopicCheckInterval time.Duration
	// RedeliverDelay is how long a delivery its handler returned without
	// settling waits before it is handed out again, and the backoff of a
	// due retry that could not be republished. Zero means the default.
	// Default 1s.
	RedeliverDelay time.Duration
	// ClientID is the client id the brokers see (in their logs and
	// quotas). Default "herald".
	ClientID string
}

func (c Config) withDefaults() Config {
	c.Settings = c.Settings.WithDefaults()
	c.Group = cmp.Or(c.Group, DefaultGroup)
	c.MaxBuffered = cmp.Or(c.MaxBuffered, max(1000, c.Prefetch))
	c.Partitions = cmp.Or(c.Partitions, 12)
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, 15*time.Second)
	c.CommitInterval = cmp.Or(c.CommitInterval, time.Second)
	c.TopicCheckInterval = cmp.Or(c.TopicCheckInterval, 30*time.Second)
	c.RedeliverDelay = cmp.Or(c.RedeliverDelay, time.Second)
	c.ClientID = cmp.Or(c.ClientID, "herald")
	if c.User != "" && c.Mechanism == "" {
		c.Mechanism = "SCRAM-SHA-512"
	}
	return c
}

func (c Config) validate() error {
	if err := c.Settings.Validate("kafka"); err != nil {
		return err
	}
	if len(c.Brokers) == 0 {
		return errors.New("kafka: at least one broker address is required")
	}
	for _, b := range c.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return fmt.Errorf("kafka: broker address %q is not host:port", b)
		}
	}
	switch {
	case c.MaxBuffered < c.Prefetch:
		return fmt.Errorf("kafka: max buffered (%d) must be at least the prefetch (%d)", c.MaxBuffered, c.Prefetch)
	case c.Partitions < 1:
		return fmt.Errorf("kafka: partitions must be at least 1, got %d", c.Partitions)
	case c.ReplicationFactor < 0:
		return fmt.Errorf("kafka: replication factor must not be negative, got %d", c.ReplicationFactor)
	case c.ConfirmTimeout <= 0, c.CommitInterval <= 0, c.TopicCheckInterval <= 0, c.RedeliverDelay <= 0:
		return errors.New("kafka: timeouts and intervals must be positive")
	}
	if _, err := c.mechanism(); err != nil {
		return err
	}
	return nil
}

// retryDelay is the wait before the retry-th retry (1 for the first).
func (c Config) retryDelay(retry int) time.Duration {
	i := min(max(retry-1, 0), len(c.RetryDelays)-1)
	return c.RetryDelays[i]
}

// Topics are the names of one installation's topics and group.
type Topics struct {
	Requested, Retry, DeadLetters, Status, Group string
}

// Topics returns the names the configuration uses, Prefix applied.
func (c Config) Topics() Topics {
	c = c.withDefaults()
	return Topics{
		Requested:   c.Prefix + TopicRequested,
		Retry:       c.Prefix + TopicRetry,
		DeadLetters: c.Prefix + TopicDeadLetters,
		Status:      c.Prefix + TopicStatus,
		Group:       c.Prefix + c.Group,
	}
}

// all lists every topic: the ones the workers use and the status topic.
func (t Topics) all() []string { return append(t.worker(), t.Status) }

// worker lists the topics a Consumer reads or writes. The status topic is
// not one of them: the Publisher (and EnsureTopics) create it, and a
// Consumer that recreated it would restart its session for a topic it does
// not read.
func (t Topics) worker() []string { return []string{t.Requested, t.Retry, t.DeadLetters} }

// topic is the topic events of type typ are produced to; ok is false for a
// type herald does not publish.
func (t Topics) topic(typ string) (topic string, ok bool) {
	switch {
	case typ == notify.EventRequested:
		return t.Requested, true
	case notify.IsStatusEvent(typ):
		return t.Status, true
	}
	return "", false
}

func (c Config) mechanism() (sasl.Mechanism, error) {
	if c.User == "" {
		return nil, nil
	}
	auth := scram.Auth{User: c.User, Pass: c.Password}
	switch strings.ToUpper(c.Mechanism) {
	case "PLAIN":
		return plain.Auth{User: c.User, Pass: c.Password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return auth.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return auth.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("kafka: unknown SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", c.Mechanism)
}

// ConnOpts returns the client options that reach the cluster: seeds,
// client id, TLS and SASL. herald bench's raw ceiling connects with them.
func (c Config) ConnOpts() []kgo.Opt {
	c = c.withDefaults()
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.WithLogger(nil),
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	if m, _ := c.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts
}

// producerOpts are the options of every client that produces: acks from
// every in-sync replica, idempotent (kgo's default, stated here because
// herald relies on it: a retried produce never duplicates nor reorders a
// record within its partition), no linger (herald waits for every batch).
func (c Config) producerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ProduceRequestTimeout(c.ConfirmTimeout),
	}
}

// ParseURL reads a HERALD_BROKER_URL of the form
// kafka://[user:password@]host:port[,host:port...][?options] into a Config
// holding the brokers and connection settings. Options: mechanism (PLAIN,
// SCRAM-SHA-256, SCRAM-SHA-512), tls (true: TLS with the system's roots),
// partitions and replication (of the topics herald creates). kafkas:// is
// kafka:// with tls=true. Errors never quote the password.
func ParseURL(raw string) (Config, error) {
	var c Config
	rest, ok := strings.CutPrefix(raw, "kafka://")
	if !ok {
		if rest, ok = strings.CutPrefix(raw, "kafkas://"); !ok {
			return c, errors.New("kafka: broker URL must start with kafka:// or kafkas://")
		}
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	rest, query, _ := strings.Cut(rest, "?")
	rest = strings.TrimSuffix(rest, "/")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo := rest[:at]
		rest = rest[at+1:]
		user, pass, _ := strings.Cut(userinfo, ":")
		var err error
		if c.User, err = url.PathUnescape(user); err != nil {
			return c, errors.New("kafka: broker URL has a malformed user name")
		}
		if c.Password, err = url.PathUnescape(pass); err != nil {
			return c, errors.New("kafka: broker URL has a malformed password")
		}
	}
	for _, b := range strings.Split(rest, ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.Brokers = append(c.Brokers, b)
		}
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return c, fmt.Errorf("kafka: broker URL options: %w", err)
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "mechanism":
			c.Mechanism = v
		case "tls":
			on, err := strconv.ParseBool(v)
			if err != nil {
				return c, fmt.Errorf("kafka: broker URL option tls=%q is not a boolean", v)
			}
			if on && c.TLS == nil {
				c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
			} else if !on {
				c.TLS = nil
			}
		case "partitions":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 1 {
				return c, fmt.Errorf("kafka: broker URL option partitions=%q: want a number >= 1", v)
			}
			c.Partitions = int32(n)
		case "replication":
			n, err := strconv.ParseInt(v, 10, 16)
			if err != nil || n < 1 {
				return c, fmt.Errorf("kafka: broker URL option replication=%q: want a number >= 1", v)
			}
			c.ReplicationFactor = int16(n)
		default:
			return c, fmt.Errorf("kafka: unknown broker URL option %q", k)
		}
	}
	return c, c.withDefaults().validate()
}
