package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/tracing"
)

// Header names the create route reads or writes.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerFault          = "X-Herald-Fault"
	headerReplayed       = "Idempotent-Replayed"
)

// maxIdempotencyKeyLen bounds Idempotency-Key so a key always fits its
// indexed column.
const maxIdempotencyKeyLen = 255

// create handles POST /notifications.
func (a *API) create(w http.ResponseWriter, r *http.Request) {
	base, req, aerr, status := a.readCreate(w, r)
	if aerr != nil {
		writeError(w, status, *aerr)
		return
	}
	var (
		created notify.Created
		err     error
	)
	// A create that read its recipient is written only while the
	// recipient is as read (NewNotification.RecipientRevision); when it
	// changed meanwhile, the create is resolved again from the new one.
	for try := 0; ; try++ {
		nn := base
		resolve := a.resolve
		if len(req.Channels) > 0 {
			resolve = a.resolveChannels
		}
		if aerr, status := resolve(r.Context(), &nn, req); aerr != nil {
			if status == http.StatusServiceUnavailable {
				a.unavailable(w, r, "resolve notification", errors.New(aerr.Message))
				return
			}
			writeError(w, status, *aerr)
			return
		}
		if try == 0 && !a.admit(w, r) {
			// Admission comes after validation: a client with a bad
			// request must fix it whatever the load, and a 429 must
			// mean "retry as is".
			return
		}
		created, err = a.createTraced(r.Context(), nn)
		if !errors.Is(err, notify.ErrRecipientChanged) || try >= maxResolveTries-1 {
			break
		}
	}
	nn := base
	switch {
	case err == nil:
	case errors.Is(err, notify.ErrConflict):
		writeError(w, http.StatusConflict, apiError{Code: "idempotency_conflict", Message: "the idempotency key was already used with a different request", Field: headerIdempotencyKey})
		return
	case errors.Is(err, notify.ErrInjectedFault):
		a.log.InfoContext(r.Context(), "create failed on purpose", "fault", nn.Fault)
		writeError(w, http.StatusInternalServerError, apiError{Code: "injected_fault", Message: "the create failed on purpose (" + headerFault + "); nothing was written"})
		return
	case errors.Is(err, notify.ErrRecipientChanged):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, apiError{Code: "recipient_changed", Message: "the recipient kept changing during the create; retry", Field: "user_id"})
		return
	default:
		a.unavailable(w, r, "create notification", err)
		return
	}
	n := created.Notification
	w.Header().Set("Location", "/notifications/"+notify.FormatID(n.ID))
	if created.Replayed {
		w.Header().Set(headerReplayed, "true")
	}
	writeJSON(w, http.StatusCreated, newNotificationView(n))
}

// admit asks Config.Admission whether a create may be written now; when
// not, it answers 429 (with Retry-After) or 503 itself and reports false.
func (a *API) admit(w http.ResponseWriter, r *http.Request) bool {
	if a.cfg.Admission == nil {
		return true
	}
	err := a.cfg.Admission(r.Context())
	if err == nil {
		return true
	}
	if ra, ok := errors.AsType[*RetryAfterError](err); ok {
		w.Header().Set("Retry-After", retryAfterSeconds(ra.After))
		writeError(w, http.StatusTooManyRequests, apiError{Code: "too_many_requests", Message: "too many pending notifications; retry later"})
		return false
	}
	a.unavailable(w, r, "admit notification", err)
	return false
}

// createTraced runs the create transaction in a span of its own, whose
// context is stored with the outbox event (the relay's publish and the
// worker's delivery become its descendants), and times it for
// herald_create_seconds. No body, address or key goes into the span.
func (a *API) createTraced(ctx context.Context, nn notify.NewNotification) (notify.Created, error) {
	ctx, span := a.tracer.Start(ctx, "create notification", trace.WithAttributes(
		attribute.String("herald.channel", nn.Request.Channel),
		attribute.Bool("herald.idempotency_key", nn.IdempotencyKey != "")))
	defer span.End()
	nn.Traceparent = tracing.Traceparent(ctx)
	start := time.Now()
	created, err := a.store.Create(ctx, nn)
	if a.metrics != nil && err == nil {
		tracing.Observe(ctx, a.metrics.create, time.Since(start).Seconds())
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "create failed")
		return created, err
	}
	span.SetAttributes(attribute.String("herald.notification_id", notify.FormatID(created.Notification.ID)),
		attribute.Bool("herald.replayed", created.Replayed))
	return created, nil
}

// unavailable logs a store failure and answers 503 without its text, which
// may hold SQL or a DSN.
func (a *API) unavailable(w http.ResponseWriter, r *http.Request, what string, err error) {
	a.log.ErrorContext(r.Context(), what+" failed", "method", r.Method, "path", r.URL.Path, "err", err)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, apiError{Code: "unavailable", Message: "the service is temporarily unavailable; retry later"})
}

// storeFailed answers a failed read or change of one resource and reports
// whether err is a failure: notFound (404) for notify.ErrNotFound, 503 for
// any other error (see unavailable, which logs it as what). On nil it
// writes nothing and reports false, leaving the reply to the caller.
func (a *API) storeFailed(w http.ResponseWriter, r *http.Request, what string, err error, notFound apiError) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, notify.ErrNotFound):
		writeError(w, http.StatusNotFound, notFound)
	default:
		a.unavailable(w, r, what, err)
	}
	return true
}

// readCreate checks a create request's headers and decodes its body:
// the create's headers in nn, the request in req. On failure it returns
// the error to answer and its status.
func (a *API) readCreate(w http.ResponseWriter, r *http.Request) (nn notify.NewNotification, req notify.CreateRequest, _ *apiError, _ int) {
	if e := checkContentType(r.Header.Values("Content-Type")); e != nil {
		return nn, req, e, http.StatusUnsupportedMediaType
	}
	key, e := idempotencyKey(r.Header)
	if e != nil {
		return nn, req, e, http.StatusBadRequest
	}
	nn.IdempotencyKey = key
	nn.RequestID = notify.RequestIDFrom(r.Context())
	if nn.Fault, e = a.fault(r.Header); e != nil {
		return nn, req, e, http.StatusBadRequest
	}
	raw, e, status := readBody(w, r, a.cfg.MaxBodyBytes, "")
	if e != nil {
		return nn, req, e, status
	}
	req, e = decodeCreate(raw, a.cfg.Channels)
	if e != nil {
		return nn, req, e, http.StatusBadRequest
	}
	return nn, req, nil, 0
}

// checkCreate validates a decoded create request and, when it is valid,
// puts it in nn with what follows from it. A single create and each item
// of a batch go through it: a check of a create belongs here.
func (a *API) checkCreate(nn *notify.NewNotification, req notify.CreateRequest) *apiError {
	if e := a.disabledChannel(req.Channel); e != nil {
		return e
	}
	if err := req.Validate(a.cfg.Channels); err != nil {
		if fe, ok := errors.AsType[*notify.FieldError](err); ok {
			return &apiError{Code: "invalid_field", Message: fe.Field + " " + fe.Message, Field: fe.Field}
		}
		return &apiError{Code: "invalid_field", Message: "the request is invalid"}
	}
	if req.Quiet != nil && req.Quiet.Location == nil {
		return errNoQuietZone
	}
	if e := schedule(&req, time.Now(), a.cfg.ScheduleHorizon); e != nil {
		return e
	}
	nn.Request = req
	nn.Destination = a.cfg.Channels.DestinationOf(req)
	return nil
}

// fault reads the X-Herald-Fault header, honoured only with
// Config.DebugFaults.
func (a *API) fault(h http.Header) (string, *apiError) {
	if !a.cfg.DebugFaults {
		return "", nil
	}
	vs, ok := h[headerFault]
	if !ok {
		return "", nil
	}
	if len(vs) != 1 || vs[0] != notify.FaultAfterOutboxInsert {
		return "", &apiError{Code: "invalid_header", Message: "must be " + strconv.Quote(notify.FaultAfterOutboxInsert), Field: headerFault}
	}
	return notify.FaultAfterOutboxInsert, nil
}

// disabledChannel is the error for a create on a channel herald knows
// but this server has not enabled (Config.DisabledChannels): it names the
// setting that enables it, not only the channels that are enabled.
func (a *API) disabledChannel(channel string) *apiError {
	how, ok := a.cfg.DisabledChannels[channel]
	if !ok {
		return nil
	}
	enabled := a.cfg.Channels.Names()
	for i, n := range enabled {
		enabled[i] = strconv.Quote(n)
	}
	return &apiError{Code: "invalid_field", Field: "channel",
		Message: fmt.Sprintf("channel %q is not enabled on this server: %s (enabled: %s)", channel, how, strings.Join(enabled, ", "))}
}

// readBody reads r's body, at most limit bytes: a larger one is answered
// too_large (413), its message ending in hint, and one that cannot be read
// invalid_body (400).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, hint string) ([]byte, *apiError, int) {
	tooLarge := &apiError{Code: "too_large", Message: "the request body is larger than " + strconv.FormatInt(limit, 10) + " bytes" + hint}
	if r.ContentLength > limit {
		return nil, tooLarge, http.StatusRequestEntityTooLarge
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge, http.StatusRequestEntityTooLarge
		}
		return nil, &apiError{Code: "invalid_body", Message: "the request body could not be read"}, http.StatusBadRequest
	}
	return raw, nil, 0
}

// checkContentType accepts one application/json Content-Type with any
// parameters, except a charset other than UTF-8: JSON on the wire is UTF-8
// (RFC 8259).
func checkContentType(cts []string) *apiError {
	e := &apiError{Code: "unsupported_media_type", Message: "Content-Type must be application/json"}
	if len(cts) != 1 {
		return e
	}
	mt, params, err := mime.ParseMediaType(cts[0])
	if err != nil || mt != "application/json" {
		return e
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		e.Message = "Content-Type charset must be utf-8"
		return e
	}
	return nil
}

// idempotencyKey returns the optional Idempotency-Key: 1 to 255 printable
// ASCII characters, given once.
func idempotencyKey(h http.Header) (string, *apiError) {
	vs, ok := h[headerIdempotencyKey]
	if !ok {
		return "", nil
	}
	if len(vs) != 1 || !validKey(vs[0]) {
		return "", &apiError{Code: "invalid_header", Message: "must be 1 to 255 printable ASCII characters, given once", Field: headerIdempotencyKey}
	}
	return vs[0], nil
}

// validKey reports whether k is a valid idempotency key: 1 to 255
// printable ASCII characters.
func validKey(k string) bool {
	if k == "" || len(k) > maxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
