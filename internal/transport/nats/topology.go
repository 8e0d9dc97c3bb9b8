package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldhq/herald/internal/notify"
)

// Headers herald sets on its messages. NATS header names are
// case-sensitive; herald writes and reads them exactly as spelled here.
const (
	// HeaderMessageID holds the outbox id in decimal: the message id the
	// worker deduplicates on. The first publish also carries it as
	// Nats-Msg-Id; copies carry a Nats-Msg-Id of their own (see msgID).
	HeaderMessageID = "x-message-id"
	// HeaderType holds the event type (notification.requested,
	// notification.sent, notification.failed).
	HeaderType = "x-type"
	// HeaderContentType holds the payload's content type,
	// application/json.
	HeaderContentType = "Content-Type"
	// HeaderRetryCount holds the number of retries before this delivery;
	// absent or 0 on the first.
	HeaderRetryCount = "x-retry-count"
	// HeaderLastError holds the reason of the last failure, on retries and
	// dead letters.
	HeaderLastError = "x-last-error"
	// HeaderOccurredAt holds when the event was written, in Unix
	// microseconds.
	HeaderOccurredAt = "x-occurred-at"
	// HeaderTraceparent holds the W3C trace context of the event's publish
	// span; retry and dead-letter copies keep it.
	HeaderTraceparent = "traceparent"
	// HeaderPriority holds the notification's priority (issue 34, point
	// 5) when it is not normal, high or bulk; copies keep it. JetStream
	// delivers in stream order: the relay's claim puts high events first
	// in each batch, and the worker reads the header, but a backlog in
	// the stream is not reordered.
	HeaderPriority = "x-priority"
	// HeaderRetryDelay holds how long a retry copy waits before it goes
	// back to notifications.requested, in milliseconds. It is a duration:
	// the server counts it (a negative acknowledgement with that delay), so
	// no worker's clock is compared with another's.
	HeaderRetryDelay = "x-retry-delay-ms"
	// HeaderDueAt held, on retry copies written before x-retry-delay-ms,
	// when the copy was due, in Unix milliseconds of the writer's clock. It
	// is no longer written nor trusted: such a copy waits the schedule's
	// delay for its retry count (see doc.go). Copies drop it.
	HeaderDueAt = "x-due-at"
)

// contentType is the content type of every payload herald publishes.
const contentType = "application/json"

// ErrTopologyMismatch means a stream exists with settings that cannot be
// updated to the declared ones (its retention, say), or its subjects belong
// to another stream. Retrying cannot cure it; an operator has to delete the
// stream or restore the setting.
var ErrTopologyMismatch = errors.New("nats stream exists with other settings")

// Topology names the streams, subjects and consumers of one herald
// installation.
type Topology struct {
	// Stream holds Requested, Retry and DeadLetter (work-queue retention).
	Stream string
	// Requested is the subject the relay publishes to and workers consume.
	Requested string
	// Retry holds retry copies until they are due.
	Retry string
	// DeadLetter keeps dead letters; nothing consumes it.
	DeadLetter string
	// WorkerConsumer is the durable pull consumer of Requested.
	WorkerConsumer string
	// RetryConsumer is the durable pull consumer of Retry that moves each
	// copy back to Requested when it is due.
	RetryConsumer string
	// StatusStream holds StatusSent and StatusFailed, with limits
	// retention and a maximum age (Config.StatusMaxAge): it is read by other
	// services, as many as like, each with a consumer of its own, and never
	// by herald (see doc.go).
	StatusStream string
	// StatusSent, StatusFailed, StatusCanceled, StatusExpired and
	// StatusSuppressed are the subjects of the status events
	// notification.sent, .failed, .canceled, .expired and .suppressed.
	StatusSent, StatusFailed, StatusCanceled, StatusExpired, StatusSuppressed string
}

// NewTopology returns the contract's names with prefix prepended to each
// (in stream and consumer names, with characters that a name cannot hold
// replaced by "_").
func NewTopology(prefix string) Topology {
	name := nameSafe(prefix)
	return Topology{
		Stream:         name + "NOTIFICATIONS",
		Requested:      prefix + "notifications.requested",
		Retry:          prefix + "notifications.retry",
		DeadLetter:     prefix + "notifications.dlq",
		WorkerConsumer: name + "herald-worker",
		RetryConsumer:  name + "herald-retry",
		StatusStream:   name + "NOTIFICATIONS_STATUS",
		StatusSent:     prefix + "notifications.status.sent",
		StatusFailed:   prefix + "notifications.status.failed",
		StatusCanceled: prefix + "notifications.status.canceled",
		StatusExpired:  prefix + "notifications.status.expired",
		// A stream declared by an older herald gains the subject at
		// start-up (declareStream updates it).
		StatusSuppressed: prefix + "notifications.status.suppressed",
	}
}

// nameSafe replaces what a stream or consumer name cannot hold (".", "*",
// ">", path separators, white space) with "_".
func nameSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}

// subject is the subject events of type typ are published to, and the
// stream that takes it; ok is false for a type herald does not publish.
func (t Topology) subject(typ string) (subject, stream string, ok bool) {
	if typ == notify.EventRequested {
		return t.Requested, t.Stream, true
	}
	for _, s := range t.statusSubjects() {
		if s.typ == typ {
			return s.subject, t.StatusStream, true
		}
	}
	return "", "", false
}

// eventSubject is the subject one event type is published to.
type eventSubject struct{ typ, subject string }

// statusSubjects pairs each status event type with its subject, in the
// order the status stream lists them: a status event added to herald is
// one row here.
func (t Topology) statusSubjects() []eventSubject {
	return []eventSubject{
		{notify.EventSent, t.StatusSent},
		{notify.EventFailed, t.StatusFailed},
		{notify.EventCanceled, t.StatusCanceled},
		{notify.EventExpired, t.StatusExpired},
		{notify.EventSuppressed, t.StatusSuppressed},
	}
}

// statusStreamConfig is the status stream as cfg declares it: limits
// retention (a message stays until it is StatusMaxAge old, whoever read
// it), so that any number of consumers each read every event, and nothing
// piles up when nobody reads.
func (t Topology) statusStreamConfig(cfg Config) jetstream.StreamConfig {
	s := streamBase(cfg)
	s.Name = t.StatusStream
	s.Description = "herald status events: notification.sent, .failed, .canceled, .expired and .suppressed, for other services"
	for _, st := range t.statusSubjects() {
		s.Subjects = append(s.Subjects, st.subject)
	}
	s.Retention = jetstream.LimitsPolicy
	s.MaxAge = cfg.StatusMaxAge
	return s
}

// streamConfig is the stream as cfg declares it: work-queue retention and
// no maximum age (a message stays until it is acknowledged).
func (t Topology) streamConfig(cfg Config) jetstream.StreamConfig {
	s := streamBase(cfg)
	s.Name = t.Stream
	s.Description = "herald notifications: requested, retries and dead letters"
	s.Subjects = []string{t.Requested, t.Retry, t.DeadLetter}
	s.Retention = jetstream.WorkQueuePolicy
	return s
}

// streamBase is what both of herald's streams declare alike: file
// storage, cfg's replicas and duplicate window, and no bound on the
// number or size of their messages.
func streamBase(cfg Config) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Storage:    jetstream.FileStorage,
		Replicas:   cfg.Replicas,
		Duplicates: cfg.DuplicateWindow,
		Discard:    jetstream.DiscardOld,
		MaxMsgs:    -1,
		MaxBytes:   -1,
	}
}

// retryMaxAckPending bounds the retry copies the retry consumer holds back
// at once: each waiting copy is one pending delivery.
const retryMaxAckPending = 1 << 20

// retryAckWait bounds the move of one due retry copy (a publish and an
// acknowledgement).
const retryAckWait = 30 * time.Second

// declareStream creates the stream, or updates it to cfg's settings when
// they differ. It asks before it updates: an update request that reaches
// nats-server 2.9 while the stream is still being created or recovered from
// disk after a restart (every process declares at start and after every
// reconnect) crashes the server (a nil dereference in updateWithAdvisory),
// so the common case, a stream that exists as wanted, sends none.
func (t Topology) declareStream(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Stream, error) {
	return declareStream(ctx, js, t.streamConfig(cfg))
}

// declareStatusStream creates the status stream, or updates it to cfg's
// settings when they differ, as declareStream does. A stream of that name
// with work-queue or interest retention (not herald's) cannot be updated:
// the server refuses, and the error wraps ErrTopologyMismatch; so does a
// stream of another name that holds the status subjects.
func (t Topology) declareStatusStream(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Stream, error) {
	return declareStream(ctx, js, t.statusStreamConfig(cfg))
}

// declareStream creates the stream want, or updates it when it differs.
func declareStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || subjectOverlap(err) {
			// Another process created it meanwhile (nats-server 2.9 may
			// answer a create racing another with the same subjects as an
			// overlap, not as the name in use): the stream of that name
			// is then there; if it is not, another stream holds the
			// subjects and the overlap stands.
			if found, ferr := js.Stream(ctx, want.Name); ferr == nil {
				s, err = found, nil
			}
		}
	}
	if err != nil {
		return nil, declareError("stream", want.Name, err)
	}
	if sameStream(s.CachedInfo().Config, want) {
		return s, nil
	}
	s, err = js.UpdateStream(ctx, want)
	if err != nil {
		return nil, declareError("stream", want.Name, err)
	}
	return s, nil
}

// sameStream reports whether a stream's configuration has the settings
// herald declares.
func sameStream(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention &&
		have.Storage == want.Storage && have.Duplicates == want.Duplicates && have.Discard == want.Discard &&
		max(have.Replicas, 1) == max(want.Replicas, 1) && have.MaxMsgs == want.MaxMsgs &&
		have.MaxBytes == want.MaxBytes && have.MaxAge == want.MaxAge && have.Description == want.Description
}

// declareConsumers creates the worker and retry consumers, or updates them
// to cfg's settings. A consumer declared by an older herald with a small
// MaxAckPending (it used to be the prefetch of whichever worker declared
// it last) is updated to the shared ceiling here: the server accepts
// MaxAckPending and AckWait changes on a live durable consumer. (The
// nats-server 2.9 crash that declareStream avoids is in the stream update
// path; consumers have always been declared this way, at every start.)
// Every worker sends the same configuration, so a real update happens once,
// after an upgrade or a change of settings; otherwise the server finds the
// configuration unchanged.
func (t Topology) declareConsumers(ctx context.Context, s jetstream.Stream, cfg Config) (worker, retry jetstream.Consumer, err error) {
	worker, err = s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       t.WorkerConsumer,
		Description:   "herald workers",
		FilterSubject: t.Requested,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxAckPending: cfg.MaxAckPending,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, nil, declareError("consumer", t.WorkerConsumer, err)
	}
	retry, err = s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       t.RetryConsumer,
		Description:   "herald retry scheduler",
		FilterSubject: t.Retry,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       retryAckWait,
		MaxAckPending: retryMaxAckPending,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, nil, declareError("consumer", t.RetryConsumer, err)
	}
	return worker, retry, nil
}

// errCodeStreamInvalidConfig is the server's error code for a stream
// configuration it refuses (JSStreamInvalidConfigF). nats-server 2.9
// answers an update that changes a stream's retention with it and HTTP-like
// code 500, not 400.
const errCodeStreamInvalidConfig jetstream.ErrorCode = 10052

// errCodeStreamSubjectOverlap is the server's error code for a stream whose
// subjects another stream holds (JSStreamSubjectOverlapErr).
const errCodeStreamSubjectOverlap jetstream.ErrorCode = 10065

// subjectOverlap reports whether err is the server's refusal of a stream
// whose subjects another stream holds.
func subjectOverlap(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamSubjectOverlap
}

// declareError marks the server's refusals of a configuration (HTTP-like
// code 400, or the invalid-configuration error code whatever its code) as
// ErrTopologyMismatch; anything else (a timeout, JetStream unavailable for
// a moment) may pass.
func declareError(kind, name string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.Code == 400 || apiErr.ErrorCode == errCodeStreamInvalidConfig) {
		hint := "delete it or restore the settings it was declared with"
		if apiErr.ErrorCode == errCodeStreamSubjectOverlap {
			hint = "another stream holds some of its subjects: delete that stream or take the subjects out of it"
		}
		return fmt.Errorf("declare %s %q: %w: %s (%s)", kind, name, ErrTopologyMismatch, apiErr.Description, hint)
	}
	return fmt.Errorf("declare %s %q: %w", kind, name, err)
}

// gone reports whether err says the stream or a consumer no longer exists.
func gone(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerDoesNotExist)
}

// Delete removes the streams of cfg (the status stream too), with their
// messages and consumers. A missing stream is not an error. Tests and
// herald bench clean up with it.
func Delete(ctx context.Context, cfg Config) error {
	cfg, nc, js, err := openJetStream(ctx, cfg, "admin")
	if err != nil {
		return err
	}
	defer nc.Close()
	topo := cfg.Topology()
	var errs []error
	for _, name := range []string{topo.Stream, topo.StatusStream} {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("delete stream %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// DeclareStream declares cfg's stream on a connection of its own, as every
// process does at start (publishers and consumers declare it again on
// every connection; consumers add their durable consumers). A stream the
// server refuses to bring to cfg's settings fails with ErrTopologyMismatch,
// marked notify.Permanent; any other error (the server unreachable) may
// pass.
func DeclareStream(ctx context.Context, cfg Config) error {
	cfg, nc, js, err := openJetStream(ctx, cfg, "start-up check")
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := cfg.Topology().declareStream(ctx, js, cfg); err != nil {
		if errors.Is(err, ErrTopologyMismatch) {
			return notify.Permanent(err)
		}
		return err
	}
	return nil
}
