package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/hostcheck"
	"github.com/heraldhq/herald/internal/monitor"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/reconcile"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/retention"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/worker"
)

// The parts each role runs: the API and its HTTP server, the relays, the
// worker, the metrics and operations endpoints (see build.go).

func (a *app) metricsHandler() http.Handler {
	// OpenMetrics when the scraper asks for it (Prometheus does): the only
	// exposition that carries the histograms' trace exemplars.
	return promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg, EnableOpenMetrics: true})
}

// apiHandler builds the HTTP API.
func (a *app) apiHandler() (http.Handler, error) {
	// The API's readiness never depends on the broker: the outbox exists
	// to take creates while it is down.
	checks := []api.Check{{Name: "store", Pinger: a.st}, {Name: "schema", Pinger: schemaCheck{a.st}}}
	var admission func(context.Context) error
	if a.cfg.MaxBacklog > 0 {
		admission = api.BacklogGate(a.st, int64(a.cfg.MaxBacklog), 250*time.Millisecond)
	}
	channels, known, err := servedChannels(a.cfg)
	if err != nil {
		return nil, err
	}
	hosts, err := allowedHosts(a.cfg)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 && allInterfaces(a.cfg.HTTPAddr) {
		a.log.Info("listening on all interfaces: the API and the console answer only Hosts that are IP addresses or localhost; list the names clients use in HERALD_ALLOWED_HOSTS",
			"addr", a.cfg.HTTPAddr)
	}
	status, err := a.newDeploymentReader()
	if err != nil {
		return nil, err
	}
	h, err := api.New(a.st, api.Config{
		Token:              a.cfg.APIToken,
		DebugFaults:        a.cfg.DebugFaults,
		Ready:              checks,
		Metrics:            a.metricsHandler(),
		Registerer:         a.reg,
		Logger:             a.log.With("component", "api"),
		Admission:          admission,
		DeadLetters:        deadletter.New(a.st, a.tr.deadLetters),
		Destinations:       a.st,
		Channels:           channels,
		DisabledChannels:   disabledChannels(a.cfg),
		CORSOrigins:        commaList(a.cfg.CORSOrigins),
		TracerProvider:     a.tp,
		AllowedHosts:       hosts,
		Status:             status,
		ScheduleHorizon:    a.cfg.ScheduleHorizon,
		Recipients:         a.st,
		Templates:          a.st,
		Preferences:        a.st,
		RequiredCategories: commaList(a.cfg.RequiredCategories),
		LinkSecret:         []byte(a.cfg.LinkSecret),
		PublicURL:          strings.TrimSuffix(a.cfg.PublicURL, "/"),
		KnownChannels:      known,
	})
	if err != nil {
		return nil, err
	}
	return a.withConsole(h.Handler(), hosts)
}

// checkAllowedHosts vets HERALD_ALLOWED_HOSTS as the settings table parses
// it.
func checkAllowedHosts(v string) error {
	_, err := hostcheck.New(commaList(v))
	return err
}

// allInterfaces reports whether addr listens on every interface.
func allInterfaces(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(h)
	return h == "" || err == nil && ip.IsUnspecified()
}

// allowedHosts are the names the API and the console answer to besides IP
// literals and localhost: HERALD_ALLOWED_HOSTS, and the host of
// HERALD_HTTP_ADDR when it is a name. A listener on all interfaces
// (":8080", "0.0.0.0:8080") names none: it cannot know the names clients
// reach it by, so it answers IP addresses and localhost until
// HERALD_ALLOWED_HOSTS lists them.
func allowedHosts(cfg Config) ([]string, error) {
	hosts := commaList(cfg.AllowedHosts)
	if err := checkAllowedHosts(cfg.AllowedHosts); err != nil {
		return nil, usageError{fmt.Errorf("HERALD_ALLOWED_HOSTS: %w", err)}
	}
	if h, _, err := net.SplitHostPort(cfg.HTTPAddr); err == nil && h != "" {
		if _, err := netip.ParseAddr(h); err != nil {
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

// commaList splits a comma-separated setting (HERALD_CORS_ORIGINS,
// HERALD_ALLOWED_HOSTS), dropping empty items; api.New checks each.
func commaList(v string) []string {
	var out []string
	for o := range strings.SplitSeq(v, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// apiParts builds what the api process runs: the HTTP server, the backlog
// monitor with its alert, retention and the reconciler.
func (a *app) apiParts() ([]func(context.Context) error, error) {
	handler, err := a.apiHandler()
	if err != nil {
		return nil, err
	}
	var tg *monitor.TelegramConfig
	if a.cfg.TelegramToken != "" && a.cfg.TelegramChatID != "" {
		tg = &monitor.TelegramConfig{Token: a.cfg.TelegramToken, ChatID: a.cfg.TelegramChatID, API: a.cfg.TelegramAPI}
	}
	m, err := monitor.New(a.st, monitor.Config{
		Interval:   a.cfg.MonitorInterval,
		Threshold:  int64(a.cfg.AlertBacklog),
		For:        a.cfg.AlertFor,
		Logger:     a.log, // no extra attrs: the contract greps for msg="alert firing" alert=OutboxBacklog
		Registerer: a.reg,
		Telegram:   tg,
	})
	if err != nil {
		return nil, err
	}
	r, err := retention.New(a.st, retention.Config{Retention: a.cfg.Retention, Logger: a.log.With("component", "retention")})
	if err != nil {
		return nil, err
	}
	rc, err := reconcile.New(a.st, reconcile.Config{After: a.cfg.ReconcileAfter, Logger: a.log.With("component", "reconcile"), Registerer: a.reg})
	if err != nil {
		return nil, err
	}
	ln := a.hooks.listener
	if ln == nil {
		if ln, err = net.Listen("tcp", a.cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", a.cfg.HTTPAddr, err)
		}
		a.close = append(a.close, func() { _ = ln.Close() })
	}
	serve := func(ctx context.Context) error { return serveHTTP(ctx, ln, handler, a.log) }
	return []func(context.Context) error{serve, m.Run, r.Run, rc.Run}, nil
}

// newRelays builds the relays of a transport with a broker. Without
// HERALD_STATUS_WEBHOOK_URL one relay publishes every outbox row, status
// events included, to the broker. With it, that relay takes only
// notification.requested, and a second one (newStatusRelay) hands the
// status events to the broker and to the webhook: each row has exactly one
// relay, and a failing webhook delays only the status events.
func (a *app) newRelays() ([]*relay.Relay, error) {
	pub, closePub, err := a.tr.publisher("relay")
	if err != nil {
		return nil, err
	}
	a.close = append(a.close, closePub)
	if a.hooks.wrapPublisher != nil {
		pub = a.hooks.wrapPublisher(pub)
	}
	var types []string
	if a.cfg.StatusWebhookURL != "" {
		types = []string{notify.EventRequested}
	}
	rl, err := relay.New(a.st, pub, a.st, relay.Config{
		Batch:      a.cfg.RelayBatch,
		Interval:   a.cfg.RelayInterval,
		Types:      types,
		Logger:     a.log.With("component", "relay"),
		Registerer: a.reg,

		TracerProvider: a.tp,
	})
	if err != nil {
		return nil, err
	}
	a.checks = append(a.checks, api.Check{Name: "relay", Pinger: rl})
	if types == nil {
		return []*relay.Relay{rl}, nil
	}
	statusPub, closeStatusPub, err := a.tr.publisher("status-relay")
	if err != nil {
		return nil, err
	}
	a.close = append(a.close, closeStatusPub)
	srl, err := a.newStatusRelay(statusPub)
	if err != nil {
		return nil, err
	}
	return []*relay.Relay{rl, srl}, nil
}

// newStatusRelay builds the relay of the status events: to broker (nil on
// the outbox table) and to HERALD_STATUS_WEBHOOK_URL when set, an event
// confirmed once every sink confirmed it; with neither, its rows are
// confirmed at once (marked processed, so the backlog counts only what
// waits for a delivery, and pruned by retention).
func (a *app) newStatusRelay(broker relay.Publisher) (*relay.Relay, error) {
	var sinks []relay.Publisher
	if broker != nil {
		sinks = append(sinks, broker)
	}
	if a.cfg.StatusWebhookURL != "" {
		if a.cfg.WebhookSecret == "" {
			return nil, usageError{errors.New("HERALD_STATUS_WEBHOOK_URL needs HERALD_WEBHOOK_SECRET, which signs the status events")}
		}
		wp, err := webhook.NewStatusPublisher(webhook.StatusConfig{
			URL: a.cfg.StatusWebhookURL, Secret: a.cfg.WebhookSecret, Timeout: a.cfg.WebhookTimeout,
		})
		if err != nil {
			return nil, usageError{fmt.Errorf("HERALD_STATUS_WEBHOOK_URL: %w", err)}
		}
		a.close = append(a.close, func() { _ = wp.Close() })
		// Each event the webhook refuses is retried on the retry
		// schedule and then dead-lettered, on its own: it never holds
		// up the others, nor the broker's copy.
		rp, err := relay.NewRetrier(wp, relay.RetryConfig{
			MaxRetries: a.cfg.MaxRetries, Delays: a.cfg.RetryDelays,
			Logger: a.log.With("component", "status-relay"), Registerer: a.reg,
		})
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, rp)
	}
	var pub relay.Publisher = relay.ConfirmAll{}
	if len(sinks) > 0 {
		f, err := relay.NewFanOut(sinks...)
		if err != nil {
			return nil, err
		}
		pub = f
	}
	rl, err := relay.New(a.st, pub, a.st, relay.Config{
		Batch:      a.cfg.RelayBatch,
		Interval:   a.cfg.RelayInterval,
		Types:      notify.StatusEventTypes,
		Name:       "status",
		Logger:     a.log.With("component", "status-relay"),
		Registerer: a.reg,
	})
	if err != nil {
		return nil, err
	}
	a.checks = append(a.checks, api.Check{Name: "status-relay", Pinger: rl})
	return rl, nil
}

// drainStatus returns a part that relays (with rl, whose sinks confirm
// at once) the status events left unprocessed by an earlier run that wrote
// them, until a batch comes back short, and then returns: the process
// writes none itself. Left alone they would count in the backlog for ever,
// and retention prunes only processed rows. A failing store is retried
// every interval until ctx ends.
func drainStatus(rl *relay.Relay, batch int, interval time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		for {
			n, err := rl.RunOnce(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err == nil && n < batch:
				return nil
			case err == nil:
				continue
			}
			if !consume.Sleep(ctx, interval) {
				return nil
			}
		}
	}
}

// newWorker builds the worker on the transport's source and one sender
// per registered channel.
func (a *app) newWorker() (*worker.Worker, error) {
	src, err := a.tr.source(a.st, "worker")
	if err != nil {
		return nil, err
	}
	channels := make(map[string]worker.Channel, len(channelKinds))
	for _, k := range enabledChannels(a.cfg) {
		snd, closeSender, err := k.open(a.cfg)
		if err != nil {
			return nil, err
		}
		a.close = append(a.close, closeSender)
		if a.hooks.wrapSender != nil {
			snd = a.hooks.wrapSender(snd)
		}
		// A channel's send timeout is its sender's own; the worker bounds
		// every send with it too, and the claim lease follows the longest
		// (the table transport's row lease is longer still). The rate is
		// the worker's: a delivery whose turn has not come is parked until
		// it before its claim, so it never costs an attempt.
		ch := k.limits(a.cfg)
		ch.Sender = snd
		channels[k.name] = ch
	}
	crash, err := crashHook(a.cfg.DebugCrash, a.log)
	if err != nil {
		return nil, err
	}
	claimLease, _ := deliveryLeases(a.cfg)
	w, err := worker.New(src, a.st, channels, worker.Config{
		RetryDelays:          a.cfg.RetryDelays,
		MaxRetries:           a.cfg.MaxRetries,
		Sends:                a.cfg.Prefetch,
		Lease:                claimLease,
		OutageSpendsAttempts: a.cfg.SMTPOutage == "attempt",
		Destinations:         destinationBook(a.st),
		DisableAfter:         a.cfg.DestinationDisableAfter,
		Logger:               a.log.With("component", "worker"),
		Registerer:           a.reg,
		Crash:                crash,
		TracerProvider:       a.tp,
	})
	if err != nil {
		return nil, usageError{fmt.Errorf("worker: %w (HERALD_SMTP_RATE=%d, HERALD_PREFETCH=%d, HERALD_EMAIL_CONCURRENCY=%d)", err, a.cfg.SMTPRate, a.cfg.Prefetch, a.cfg.EmailConcurrency)}
	}
	for _, name := range w.Channels() {
		a.checks = append(a.checks, api.Check{Name: "sender:" + name, Pinger: senderCheck{w, name}, ShowReason: true})
	}
	return w, nil
}

// destinationBook is the store's record of destinations that are not up,
// nil for a store that keeps none.
func destinationBook(st store) worker.DestinationBook {
	if b, ok := st.(worker.DestinationBook); ok {
		return b
	}
	return nil
}

// senderCheck is the worker's readiness as to its sender: not ready while
// sends are paused (the provider down or throttling), with the reason.
type senderCheck struct {
	w       *worker.Worker
	channel string
}

func (c senderCheck) Ping(context.Context) error {
	if up, reason := c.w.ChannelStatus(c.channel); !up {
		return errors.New(reason)
	}
	return nil
}

// metricsParts is the own listener of relay and worker, when
// HERALD_METRICS_ADDR is set: /metrics, /healthz, and /readyz (the store,
// its schema and the broker).
func (a *app) metricsParts() ([]func(context.Context) error, error) {
	if a.cfg.MetricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", a.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", a.cfg.MetricsAddr, err)
	}
	a.close = append(a.close, func() { _ = ln.Close() })
	return []func(context.Context) error{func(ctx context.Context) error {
		return serveHTTP(ctx, ln, a.opsHandler(), a.log)
	}}, nil
}

// opsHandler serves the relay's and the worker's /metrics, /healthz and
// /readyz.
func (a *app) opsHandler() http.Handler {
	checks := []api.Check{{Name: "store", Pinger: a.st}, {Name: "schema", Pinger: schemaCheck{a.st}}}
	if a.tr.probe != nil {
		checks = append(checks, api.Check{Name: "broker", Pinger: a.tr.probe})
	}
	checks = append(checks, a.checks...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metricsHandler())
	mux.Handle("GET /readyz", api.Ready(checks, a.log))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	return mux
}

// serveHTTP serves h on ln until ctx ends, then shuts down gracefully.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Info("listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down %s: %w", ln.Addr(), err)
	}
	return nil
}
