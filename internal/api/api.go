// Package api is herald's HTTP API: it accepts notifications, shows them,
// and answers health, readiness and metrics probes.
//
// Every reply is JSON; every error has the shape
// {"error":{"code","message","field"}}. Errors are mapped to HTTP statuses
// here and nowhere else, and internal error text (SQL, DSNs, stack traces) is
// logged, never sent to the client.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/hostcheck"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/tracing"
)

// DefaultMaxBodyBytes is the default limit on a request body: 1 MiB, as the
// contract promises.
const DefaultMaxBodyBytes = 1 << 20

// readyTimeout bounds each readiness ping so that a hung dependency makes
// /readyz answer 503 instead of hanging the prober.
const readyTimeout = 2 * time.Second

// Check is one dependency that GET /readyz pings.
type Check struct {
	// Name identifies the dependency in the readiness reply ("store",
	// "broker"). Required.
	Name string
	// Pinger is pinged on every readiness probe. Required.
	Pinger Pinger
	// ShowReason puts the failure's text in the reply (under "reasons"),
	// for checks whose errors hold no secret (the sender's state); other
	// failures are only named, since a driver error may quote a DSN.
	ShowReason bool
}

// Config configures the API.
type Config struct {
	// Token, when not empty, is required as "Authorization: Bearer <token>"
	// on every route but /healthz, /readyz and /metrics. Default: empty (no
	// authentication).
	Token string
	// DebugFaults enables the X-Herald-Fault request header; when false the
	// header is ignored. Default: false. Never enable it in production.
	DebugFaults bool
	// Ready lists the dependencies GET /readyz pings. Default: none (ready
	// whenever the process answers).
	Ready []Check
	// Metrics, when set, is served at GET /metrics (usually promhttp's
	// handler for the process's registry). Default: nil (no /metrics route).
	Metrics http.Handler
	// Registerer, when set, receives the API's request metrics
	// (herald_http_requests_total, herald_http_request_duration_seconds).
	// Default: nil (no request metrics).
	Registerer prometheus.Registerer
	// Logger receives store failures and other errors kept from clients.
	// Default: a logger that discards everything.
	Logger *slog.Logger
	// MaxBodyBytes limits the size of a request body; larger bodies get 413.
	// A limit of zero would refuse every create, so zero means the default,
	// DefaultMaxBodyBytes (1 MiB); it must not be negative.
	MaxBodyBytes int64
	// MaxBatch is the most items a batch create (POST
	// /notifications/batch) may hold; a larger batch gets 413. Zero means
	// the default, notify.MaxBatch (1,000).
	MaxBatch int
	// MaxBatchBytes limits the size of a batch create's request body (each
	// of its items is held to MaxBodyBytes too); larger bodies get 413.
	// Zero means the default, DefaultMaxBatchBytes (16 MiB).
	MaxBatchBytes int64
	// Admission, when set, is asked before every create is written. An
	// error wrapping a *RetryAfterError makes the create answer 429 with
	// Retry-After; any other error answers 503. Default: nil (always admit).
	Admission func(ctx context.Context) error
	// DeadLetters, when set, serves GET /dead-letters and
	// POST /dead-letters/redrive (behind the token). Default: nil (no
	// dead-letter routes).
	DeadLetters notify.DeadLetters
	// Destinations, when set, serves GET /destinations and POST
	// /destinations/{key}/enable (behind the token). Default: nil (no
	// destination routes).
	Destinations Destinations
	// Channels are the channels a create may name, with their validation.
	// A create naming another is refused (400, field channel, listing
	// them). No channel at all means nothing; so the zero value means the
	// default. Default: notify.EmailOnly().
	Channels notify.Channels
	// DisabledChannels are the channels herald knows that this server has
	// not enabled, each with what enables it ("set HERALD_WEBHOOK_SECRET
	// ..."): a create naming one is refused (400, field channel) with that
	// text, instead of a bare list of the enabled channels. Default: none.
	DisabledChannels map[string]string
	// CORSOrigins are the browser origins allowed to call the API
	// (HERALD_CORS_ORIGINS): exact origins ("https://app.example.com") or
	// "*" for any. Default: none (no CORS headers; browsers on other
	// origins are refused by their own rules).
	CORSOrigins []string
	// TracerProvider, when set, traces every request but the probes
	// (/healthz, /readyz, /metrics): a server span per request, the
	// client's W3C traceparent honoured as its parent, and a span around
	// the create transaction whose context is stored with the outbox
	// event. Default: nil (no spans).
	TracerProvider trace.TracerProvider
	// Status, when set, serves GET /status (behind the token): the
	// notifications pending, the broker's queues and every herald
	// process's report. Default: nil (no status route).
	Status Status
	// AllowedHosts are the names the API answers to besides IP literals
	// and localhost, which it always answers (package hostcheck): exact
	// names, ".example.com" for a domain and every name under it, or "*"
	// for any Host. A request naming another Host gets 421 and does
	// nothing: a page on a name rebound to herald's address must not read
	// or change anything. The routes that need no token (the probes,
	// /metrics, /openapi.json) answer any Host, as orchestrators and
	// scrapers address them by names herald cannot know. Default: none.
	AllowedHosts []string
	// ScheduleHorizon is how far ahead a create's send_at may lie
	// (HERALD_SCHEDULE_HORIZON); a send_at further ahead is refused (400,
	// field send_at). No scheduling horizon at all would refuse every
	// send_at ahead, which send_at exists for, so zero means the default,
	// DefaultScheduleHorizon (a year); it must not be negative.
	ScheduleHorizon time.Duration
	// Recipients, when set, serves PUT/GET/DELETE /recipients/{user_id}
	// (behind the token), and lets a create leave out to: its address is
	// then the recipient's for the channel. Default: nil (no recipient
	// routes; every create gives to).
	Recipients Recipients
	// Templates, when set, serves PUT/GET /templates/{name}, GET
	// /templates and POST /templates/{name}/preview (behind the token),
	// and lets a create name a template. Default: nil (no template
	// routes).
	Templates Templates
	// Preferences, when set, serves GET/PUT
	// /recipients/{user_id}/preferences and the preference links (behind
	// the token, but for /unsubscribe/{token}, which the link's signature
	// guards), and lets a create carry a category its user may have opted
	// out of. Default: nil (no preference routes; a create with a
	// category is never suppressed).
	Preferences Preferences
	// RequiredCategories are the categories no user may opt out of
	// (HERALD_REQUIRED_CATEGORIES): a PUT that opts out of one is refused
	// (422) and a create in one is never suppressed. Default: none.
	RequiredCategories []string
	// LinkSecret is the key that signs preference links
	// (HERALD_LINK_SECRET); empty: links are off, and the routes that
	// make or follow them say so. Default: empty.
	LinkSecret []byte
	// PublicURL is the base URL herald is reached under from the outside
	// (HERALD_PUBLIC_URL, such as https://herald.example.com): a
	// preference link is made absolute with it; without it, a link is a
	// path. Default: empty.
	PublicURL string
	// KnownChannels are every channel herald knows, enabled here or not,
	// with their validation: a recipient's address and a template's
	// channel are checked against them, so that a recipient may hold a
	// webhook URL (checked by the SSRF guard) before webhooks are
	// enabled. Default: Channels.
	KnownChannels notify.Channels
}

// DefaultScheduleHorizon is Config.ScheduleHorizon's default: a year.
const DefaultScheduleHorizon = 365 * 24 * time.Hour

func (c Config) withDefaults() Config {
	if len(c.Channels) == 0 {
		c.Channels = notify.EmailOnly()
	}
	if len(c.KnownChannels) == 0 {
		c.KnownChannels = c.Channels
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.ScheduleHorizon == 0 {
		c.ScheduleHorizon = DefaultScheduleHorizon
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = notify.MaxBatch
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	return c
}

func (c Config) validate() error {
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("max body bytes must not be negative, got %d", c.MaxBodyBytes)
	}
	if c.ScheduleHorizon < 0 {
		return fmt.Errorf("schedule horizon must not be negative, got %s", c.ScheduleHorizon)
	}
	if c.MaxBatch < 0 || c.MaxBatchBytes < 0 {
		return fmt.Errorf("max batch and max batch bytes must not be negative, got %d and %d", c.MaxBatch, c.MaxBatchBytes)
	}
	seen := make(map[string]bool, len(c.Ready))
	for i, ch := range c.Ready {
		switch {
		case ch.Name == "":
			return fmt.Errorf("ready check %d: name is required", i)
		case ch.Pinger == nil:
			return fmt.Errorf("ready check %q: pinger is required", ch.Name)
		case seen[ch.Name]:
			return fmt.Errorf("ready check %q: name is used twice", ch.Name)
		}
		seen[ch.Name] = true
	}
	if err := checkRecipientFields(c.KnownChannels.RecipientFields()); err != nil {
		return err
	}
	return CheckCORSOrigins(c.CORSOrigins)
}

// checkRecipientFields reports a channel's recipient field that a
// recipient's JSON cannot hold: one another channel has, or one of the
// recipient's own fields.
func checkRecipientFields(fields []notify.RecipientField) error {
	taken := map[string]string{"user_id": "", "locale": "", "time_zone": "", "revision": "", "updated_at": ""}
	for _, f := range fields {
		if other, ok := taken[f.Field]; ok {
			if other == "" {
				return fmt.Errorf("channel %q: recipient field %q is a field of every recipient", f.Channel, f.Field)
			}
			return fmt.Errorf("channels %q and %q: both have recipient field %q", other, f.Channel, f.Field)
		}
		taken[f.Field] = f.Channel
	}
	return nil
}

// CheckCORSOrigins reports the first of origins that Config.CORSOrigins
// may not hold: each must be "*" or an exact origin, scheme://host[:port].
func CheckCORSOrigins(origins []string) error {
	for _, o := range origins {
		if !validCORSOrigin(o) {
			return fmt.Errorf("CORS origin %q is not * or scheme://host[:port]", o)
		}
	}
	return nil
}

// routeUnmatched labels requests that matched no route (404, 405) in the
// request metrics, so that raw paths never become label values. Matched
// requests are labelled with their route pattern, "GET /notifications/{id}".
const routeUnmatched = "unmatched"

// probeMethods are the methods tried to fill the Allow header of a 405.
var probeMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// API serves herald's HTTP API.
type API struct {
	store  Notifications
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	routes map[string]bool
	open   map[string]bool
	// openPrefixes are the prefixes of the open operations with a
	// wildcard segment (see isOpen).
	openPrefixes []string
	tokenH       [sha256.Size]byte
	metrics      *httpMetrics
	tracer       trace.Tracer
	traced       bool
	hosts        *hostcheck.Guard
	handler      http.Handler
	// templates caches parsed template versions (resolve.go).
	templates templateCache
	// recipientFields are the address fields of a recipient
	// (KnownChannels.RecipientFields).
	recipientFields []notify.RecipientField
}

// New returns the API over store. It fails when the configuration is
// invalid or the metrics cannot be registered.
func New(store Notifications, cfg Config) (*API, error) {
	if store == nil {
		return nil, errors.New("new api: store is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new api: %w", err)
	}
	a := &API{store: store, cfg: cfg, log: slog.New(tracing.NewLogHandler(cfg.Logger.Handler())), mux: http.NewServeMux(), routes: map[string]bool{}, open: map[string]bool{},
		tracer: tracing.Tracer(cfg.TracerProvider), traced: cfg.TracerProvider != nil, recipientFields: cfg.KnownChannels.RecipientFields()}
	if cfg.Token != "" {
		a.tokenH = sha256.Sum256([]byte(cfg.Token))
	}
	if cfg.Registerer != nil {
		m, err := newHTTPMetrics(cfg.Registerer)
		if err != nil {
			return nil, fmt.Errorf("new api: %w", err)
		}
		a.metrics = m
	}
	hosts, err := hostcheck.New(cfg.AllowedHosts)
	if err != nil {
		return nil, fmt.Errorf("new api: allowed hosts: %w", err)
	}
	a.hosts = hostcheck.NewGuard(hosts, a.log)
	if err := a.register(); err != nil {
		return nil, fmt.Errorf("new api: %w", err)
	}
	a.handler = withRequestID(a.withHosts(a.withCORS(http.HandlerFunc(a.serve))))
	return a, nil
}

// Handler returns the http.Handler serving every route.
func (a *API) Handler() http.Handler { return a.handler }

// serve is the edge (inside withRequestID, withHosts and withCORS): it recovers panics, records metrics, authenticates and
// turns the mux's plain-text 404 and 405 into JSON errors.
func (a *API) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	pattern, route := a.route(r)
	sw := &statusWriter{ResponseWriter: w}
	if a.traced && !a.isOpen(r.URL.Path) {
		var span trace.Span
		r, span = a.startSpan(r, route)
		defer func() {
			code := sw.code()
			span.SetAttributes(attribute.Int("http.response.status_code", code))
			if code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(code))
			}
			span.End()
		}()
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			a.log.ErrorContext(r.Context(), "http handler panicked", "route", route, "panic", fmt.Sprint(v))
			if !sw.wrote {
				writeError(sw, http.StatusInternalServerError, apiError{Code: "internal", Message: "internal error"})
			}
		}
		a.metrics.observe(route, sw.code(), time.Since(start))
		a.log.DebugContext(r.Context(), "http request", "method", r.Method, "route", route, "status", sw.code(), "duration", time.Since(start))
	}()

	if !a.isOpen(r.URL.Path) && !a.authorized(r) {
		sw.Header().Set("WWW-Authenticate", "Bearer")
		writeError(sw, http.StatusUnauthorized, apiError{Code: "unauthorized", Message: msgUnauthorized})
		return
	}
	if pattern != "" {
		a.mux.ServeHTTP(sw, r)
		return
	}
	if allow := a.allowed(r); len(allow) > 0 {
		sw.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(sw, http.StatusMethodNotAllowed, apiError{Code: "method_not_allowed", Message: "method " + r.Method + " is not allowed here"})
		return
	}
	writeError(sw, http.StatusNotFound, apiError{Code: "not_found", Message: "no such resource"})
}

// route is the mux pattern r matches ("" for none) and its label in the
// request metrics.
func (a *API) route(r *http.Request) (pattern, label string) {
	_, pattern = a.mux.Handler(r)
	if a.routes[pattern] {
		return pattern, pattern
	}
	return pattern, routeUnmatched
}

// startSpan starts the server span of r, as a child of the client's
// traceparent when it sent a valid one, and returns r with the span in its
// context. The span names the route pattern, never the raw path.
func (a *API) startSpan(r *http.Request, route string) (*http.Request, trace.Span) {
	ctx := tracing.ExtractHTTP(r.Context(), propagation.HeaderCarrier(r.Header))
	name := route
	if route == routeUnmatched {
		name = r.Method
	}
	ctx, span := a.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route)))
	return r.WithContext(ctx), span
}

// allowed lists the methods a route accepts at r's path, asking the mux
// itself so that the Allow header can never disagree with the routes.
func (a *API) allowed(r *http.Request) []string {
	var allow []string
	for _, m := range probeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := a.mux.Handler(probe); a.routes[p] {
			allow = append(allow, m)
		}
	}
	return slices.Clip(allow)
}

// authorized compares SHA-256 digests in constant time, so that neither the
// token's content nor its length leaks through timing.
func (a *API) authorized(r *http.Request) bool {
	if a.cfg.Token == "" {
		return true
	}
	h := r.Header.Get("Authorization")
	const scheme = "bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(h[len(scheme):])))
	return subtle.ConstantTimeCompare(got[:], a.tokenH[:]) == 1
}

// statusWriter remembers the status for the metrics and whether anything was
// written, so that a panic after the header went out does not write twice.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status = code
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status = http.StatusOK
		w.wrote = true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (flush,
// deadlines) through the wrapper.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
