// Package console is herald's web console for operators, served at /ui on
// the API's listener: an overview of the backlog, the dead letters and the
// senders, the notifications with their attempts, the dead-letter
// redrive, and the destinations that are not up.
//
// Pages are rendered on the server with html/template, so every read-only
// view works without JavaScript; one small script (assets/console.js, no
// library) shows times in the browser's zone and refreshes the overview.
// With an API token configured the console is behind a login form that sets
// an HttpOnly, SameSite=Strict session cookie; every POST carries a CSRF
// token; every reply carries a Content-Security-Policy that allows no inline
// script.
package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/internal/hostcheck"
	"github.com/heraldhq/herald/internal/notify"
)

// Prefix is the path the console is served under.
const Prefix = "/ui"

// DefaultSessionTTL is how long a login lasts.
const DefaultSessionTTL = 12 * time.Hour

// Notifications reads notifications. The stores implement it.
type Notifications interface {
	// Get returns one notification, with its body, or notify.ErrNotFound.
	Get(ctx context.Context, id int64) (notify.Notification, error)
	// List returns a page of the notifications f selects, newest first.
	List(ctx context.Context, f notify.ListFilter) (notify.ListPage, error)
	// AttemptPage returns the page of a notification's attempts f
	// selects, or notify.ErrNotFound.
	AttemptPage(ctx context.Context, id int64, f notify.AttemptFilter) (notify.AttemptPage, error)
	// Cancel cancels a pending or scheduled notification, as POST
	// /notifications/{id}/cancel does.
	Cancel(ctx context.Context, id int64) (notify.Notification, error)
}

// Stats answers the overview's counts. The stores implement it.
type Stats interface {
	// OutboxStats reports the backlog and the number of dead letters.
	OutboxStats(ctx context.Context) (notify.OutboxStats, error)
	// Activity counts what was created, delivered and dead-lettered since.
	Activity(ctx context.Context, since time.Time) (notify.Activity, error)
}

// Destinations lists the destinations that are not up and enables one.
// The stores implement it, as for GET /destinations.
type Destinations interface {
	ListDestinations(ctx context.Context, f notify.DestinationFilter) (notify.DestinationPage, error)
	EnableDestination(ctx context.Context, key string) error
}

// Templates lists the templates, each as of its newest version.
type Templates interface {
	Templates(ctx context.Context) ([]notify.Template, error)
}

// SenderState is what a worker in this process knows of one channel's
// sender.
type SenderState struct {
	// Channel is the channel the sender delivers ("email").
	Channel string
	// Up is true while the provider takes sends.
	Up bool
	// Reason says why sends are paused (down, or throttled) when not Up.
	Reason string
	// Class is "down" or "throttled" when not Up.
	Class string
	// Until is the earliest next probe or trial send when not Up (for a
	// throttled provider, at least its Retry-After); zero when unknown.
	Until time.Time
	// PausedDestinations counts the channel's destinations paused on
	// their own (a webhook endpoint down or throttling).
	PausedDestinations int
}

// Config configures the console.
type Config struct {
	// Filters read a listing's query parameters with the API's rules, so
	// that a link the console makes (or a user edits) is read as GET
	// /notifications and GET /destinations read it. The composition root
	// gives the API's parsers; the console does not import the API.
	// Required.
	Filters Filters
	// Token, when not empty, is the API token: the console asks for it on a
	// login form. Default: empty (no login, as the API needs no token).
	Token string
	// Senders, when set, reports the senders of the worker running in this
	// process (herald serve), and false when no worker runs in it (herald
	// api: the workers run elsewhere), which the overview says. Default:
	// nil, the same as false.
	Senders func() ([]SenderState, bool)
	// Channels are the channels the API accepts; the list's channel filter
	// takes their names. Default: email alone.
	Channels notify.Channels
	// KnownChannels are every channel herald knows, enabled or not, as the
	// API's Config.KnownChannels: the Recipients page shows the address
	// field of each, as GET /recipients/{user_id} does. Default: Channels.
	KnownChannels notify.Channels
	// From is the email From address (HERALD_SMTP_FROM): the detail page
	// shows the Message-ID every attempt carried, whose domain is its
	// domain. Default: empty (the worker's fallback, localhost).
	From string
	// Metrics, when set, is the process's registry; the overview reads
	// herald_reconciled_total from it. Default: nil (no count shown).
	Metrics prometheus.Gatherer
	// SessionTTL is how long a login lasts. Default: DefaultSessionTTL (set
	// by the caller; zero is refused).
	SessionTTL time.Duration
	// RefreshEvery is how often the overview refreshes itself in the
	// browser. Default: 5s (set by the caller; zero is refused).
	RefreshEvery time.Duration
	// Logger receives store failures, which pages only name. Default: a
	// logger that discards everything.
	Logger *slog.Logger
	// Destinations, when set, serves the Destinations page (the records
	// of the destinations that are not up, each with an Enable button).
	// Default: nil (no page).
	Destinations Destinations
	// Templates, when set, serves the Templates page: every template with
	// its variants, and a preview of one rendered with data, as POST
	// /templates/{name}/preview renders it. Default: nil (no page).
	Templates Templates
	// AllowedHosts are the names the console answers to besides IP
	// literals and localhost, as the API's (its Config.AllowedHosts):
	// exact names, ".example.com" suffixes or "*". A request naming
	// another Host gets 421 and a plain page, before any page, cookie or
	// CSRF token is made, and a form's Origin must name an allowed host as
	// well as the request's. Default: none.
	AllowedHosts []string
	// LoginPerAddress limits the logins of one client address (the
	// connection's peer; an IPv6 address by its /64) and LoginGlobal those
	// of all addresses together: past either the login answers 429 with
	// Retry-After, before the token is compared. A right token gives its
	// turn back. Defaults (the zero value): DefaultLoginPerAddress,
	// DefaultLoginGlobal.
	LoginPerAddress, LoginGlobal LoginLimit
	// LoginAddresses is how many client addresses the per-address limit
	// remembers. Default (zero): DefaultLoginAddresses.
	LoginAddresses int
	// Deployment, when set, is what the overview shows of the whole
	// deployment: the notifications pending, the broker's queues and the
	// state of every herald process and its senders, as the processes
	// report it. Senders is then not used. Default: nil (the overview
	// shows this process's senders alone).
	Deployment Deployment
	// Recipients, when set, serves the Recipients page: a user's
	// recipient record and preferences, looked up by user id, and a form
	// that records one preference as a preference link does (the others
	// stay). Default: nil (no page).
	Recipients Recipients
	// RequiredCategories are the categories no user may opt out of
	// (HERALD_REQUIRED_CATEGORIES): the Recipients page refuses an opt-out
	// of one. Default: none.
	RequiredCategories []string
	// Registerer, when set, receives the console's metrics
	// (herald_console_login_failures_total,
	// herald_console_login_throttled_total). Default: nil (none).
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Channels == nil {
		c.Channels = notify.EmailOnly()
	}
	if c.KnownChannels == nil {
		c.KnownChannels = c.Channels
	}
	c.LoginPerAddress = c.LoginPerAddress.orDefault(DefaultLoginPerAddress)
	c.LoginGlobal = c.LoginGlobal.orDefault(DefaultLoginGlobal)
	if c.LoginAddresses == 0 {
		c.LoginAddresses = DefaultLoginAddresses
	}
	return c
}

func (c Config) validate() error {
	if c.SessionTTL <= 0 {
		return fmt.Errorf("session TTL must be positive, got %s", c.SessionTTL)
	}
	if c.RefreshEvery <= 0 {
		return fmt.Errorf("refresh interval must be positive, got %s", c.RefreshEvery)
	}
	if c.LoginAddresses < 1 {
		return fmt.Errorf("login addresses must be positive, got %d", c.LoginAddresses)
	}
	return errors.Join(c.LoginPerAddress.validate("per-address"), c.LoginGlobal.validate("global"))
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Console serves the web console.
type Console struct {
	notes  Notifications
	stats  Stats
	dead   notify.DeadLetters
	cfg    Config
	log    *slog.Logger
	pages  map[string]*template.Template
	mux    *http.ServeMux
	key    []byte // signs sessions and CSRF tokens
	assets http.Handler
	hosts  *hostcheck.Guard
	logins *loginThrottle
}

// Filters reads the listings' query parameters (see Config.Filters). An
// error that names the parameter at fault has a method Param() string.
type Filters struct {
	Notifications func(q url.Values, channels notify.Channels) (notify.ListFilter, error)
	Destinations  func(q url.Values) (notify.DestinationFilter, error)
}

// paramOf is the parameter a filter's error names, "" for none.
func paramOf(err error) string {
	if pe, ok := errors.AsType[interface {
		error
		Param() string
	}](err); ok {
		return pe.Param()
	}
	return ""
}

// New returns the console over its sources.
func New(notes Notifications, stats Stats, dead notify.DeadLetters, cfg Config) (*Console, error) {
	if notes == nil || stats == nil || dead == nil {
		return nil, errors.New("new console: notifications, stats and dead letters are required")
	}
	if cfg.Filters.Notifications == nil || cfg.Filters.Destinations == nil {
		return nil, errors.New("new console: the listings' filters are required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new console: %w", err)
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, fmt.Errorf("new console: %w", err)
	}
	hosts, err := hostcheck.New(cfg.AllowedHosts)
	if err != nil {
		return nil, fmt.Errorf("new console: allowed hosts: %w", err)
	}
	logins, err := newLoginThrottle(cfg.LoginPerAddress, cfg.LoginGlobal, cfg.LoginAddresses, cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new console: %w", err)
	}
	c := &Console{notes: notes, stats: stats, dead: dead, cfg: cfg, log: cfg.Logger, pages: pages, mux: http.NewServeMux(),
		hosts: hostcheck.NewGuard(hosts, cfg.Logger), logins: logins}
	if cfg.Token != "" {
		c.key = sessionKey(cfg.Token)
	} else {
		c.key = make([]byte, 32)
		_, _ = rand.Read(c.key)
	}
	sub, _ := fs.Sub(assetFS, "assets")
	c.assets = http.StripPrefix(Prefix+"/assets/", http.FileServerFS(sub))
	c.routes()
	return c, nil
}

// sessionKey derives the key that signs sessions and CSRF tokens from the
// API token, so that every API replica accepts the sessions of the others,
// and a new token ends every session.
func sessionKey(token string) []byte {
	k := sha256.Sum256([]byte("herald console session key\x00" + token))
	return k[:]
}

func (c *Console) routes() {
	m := c.mux
	m.HandleFunc("GET "+Prefix+"/assets/", c.serveAsset)
	m.HandleFunc("GET "+Prefix+"/login", c.loginPage)
	m.HandleFunc("POST "+Prefix+"/login", c.login)
	m.HandleFunc("POST "+Prefix+"/logout", c.authed(c.logout))
	m.HandleFunc("GET "+Prefix+"/{$}", c.authed(c.overview))
	m.HandleFunc("GET "+Prefix+"/overview", c.authed(c.overviewFragment))
	m.HandleFunc("GET "+Prefix+"/notifications", c.authed(c.notifications))
	m.HandleFunc("GET "+Prefix+"/notifications/{id}", c.authed(c.detail))
	m.HandleFunc("POST "+Prefix+"/notifications/{id}/cancel", c.authed(c.cancelNotification))
	m.HandleFunc("GET "+Prefix+"/dead-letters", c.authed(c.deadLetters))
	m.HandleFunc("POST "+Prefix+"/dead-letters/redrive", c.authed(c.redrive))
	if c.cfg.Templates != nil {
		m.HandleFunc("GET "+Prefix+"/templates", c.authed(c.templates))
	}
	if c.cfg.Recipients != nil {
		m.HandleFunc("GET "+Prefix+"/recipients", c.authed(c.recipients))
		m.HandleFunc("POST "+Prefix+"/recipients/preferences", c.authed(c.setPreference))
	}
	if c.cfg.Destinations != nil {
		m.HandleFunc("GET "+Prefix+"/destinations", c.authed(c.destinations))
		m.HandleFunc("POST "+Prefix+"/destinations/enable", c.authed(c.enableDestination))
	}
	m.HandleFunc(Prefix+"/", c.authed(c.notFound))
}

// ServeHTTP serves the console's routes, all under Prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No inline script, no inline style, nothing from elsewhere: the page
	// loads its one stylesheet and its one script from the console itself.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	if !c.hosts.Allow(r) {
		c.misdirected(w, r)
		return
	}
	if r.URL.Path == Prefix {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// misdirected answers a request whose Host is not the console's (DNS
// rebinding): 421 and a plain page, with no cookie and no CSRF token.
func (c *Console) misdirected(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if len(host) > 256 {
		host = host[:256] + "..."
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "421 Misdirected Request: this console does not answer to the Host "+strconv.Quote(host)+
		". If a proxy serves herald under that name, list it in HERALD_ALLOWED_HOSTS.", http.StatusMisdirectedRequest)
}

func (c *Console) serveAsset(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	c.assets.ServeHTTP(w, r)
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusNotFound, "error", errorPage{Title: "Not found", Message: "There is no such page in the console."})
}
