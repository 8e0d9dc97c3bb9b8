package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/monitor"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/retention"
	"github.com/heraldhq/herald/internal/sender/mbox"
	"github.com/heraldhq/herald/internal/sender/smtp"
	herstore "github.com/heraldhq/herald/internal/store"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
	"github.com/heraldhq/herald/internal/transport/table"
	"github.com/heraldhq/herald/internal/worker"
)

// store is everything herald asks of a database: the one contract both
// engines implement. This file is the one place that picks an
// implementation.
type store = herstore.Store

// MboxPath is where mail goes when HERALD_SMTP_URL is unset.
const mboxPath = "herald.mbox"

// openStore opens the store HERALD_DATABASE_URL names. conns sizes a
// PostgreSQL pool (0: the store's default); see poolSize.
func openStore(ctx context.Context, url string, conns int) (store, func(), error) {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		s, err := postgres.Open(ctx, url, postgres.Config{MaxConns: conns})
		if err != nil {
			return nil, nil, fmt.Errorf("open postgres store: %w", err)
		}
		return s, s.Close, nil
	case strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "//")
		if path == "" {
			return nil, nil, fmt.Errorf("HERALD_DATABASE_URL %q names no file (want sqlite:PATH)", url)
		}
		s, err := sqlite.Open(ctx, path, sqlite.Config{})
		if err != nil {
			return nil, nil, fmt.Errorf("open sqlite store %s: %w", path, err)
		}
		return s, func() { _ = s.Close() }, nil
	default:
		return nil, nil, fmt.Errorf("HERALD_DATABASE_URL must start with postgres:// or sqlite:, got %q", redact(url))
	}
}

// poolSize is the PostgreSQL pool of a long-running process: a worker's
// deliveries each hold a connection across their send, so the pool follows
// HERALD_PREFETCH, with room for the relay, the API and claims beside them.
func poolSize(cfg Config) int {
	return max(10, cfg.Prefetch+4)
}

// app holds what the long-running commands share.
type app struct {
	cfg   Config
	log   *slog.Logger
	st    store
	reg   *prometheus.Registry
	close []func()
}

func newApp(ctx context.Context, cfg Config, e env, migrate bool) (*app, error) {
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	st, closeStore, err := openStore(ctx, cfg.DatabaseURL, poolSize(cfg))
	if err != nil {
		return nil, err
	}
	a := &app{cfg: cfg, log: log, st: st, close: []func(){closeStore}}
	if migrate {
		if err := st.Migrate(ctx); err != nil {
			a.Close()
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return a, nil
}

func (a *app) Close() {
	for i := len(a.close) - 1; i >= 0; i-- {
		a.close[i]()
	}
}

func (a *app) metricsHandler() http.Handler {
	return promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg})
}

// apiHandler builds the HTTP API.
func (a *app) apiHandler() (http.Handler, error) {
	checks := []api.Check{{Name: "store", Pinger: a.st}}
	if a.cfg.BrokerURL != "" {
		checks = append(checks, api.Check{Name: "broker", Pinger: rabbitmq.Pinger{URL: a.cfg.BrokerURL}})
	}
	var queue deadletter.Queue
	if a.cfg.BrokerURL != "" {
		queue = dlqRemover{cfg: a.rabbitConfig("api")}
	}
	var admission func(context.Context) error
	if a.cfg.MaxBacklog > 0 {
		admission = api.BacklogGate(a.st, int64(a.cfg.MaxBacklog), 250*time.Millisecond)
	}
	h, err := api.New(a.st, api.Config{
		Token:       a.cfg.APIToken,
		DebugFaults: a.cfg.DebugFaults,
		Ready:       checks,
		Metrics:     a.metricsHandler(),
		Registerer:  a.reg,
		Logger:      a.log.With("component", "api"),
		Admission:   admission,
		DeadLetters: deadletter.New(a.st, queue),
	})
	if err != nil {
		return nil, err
	}
	return h.Handler(), nil
}

func (a *app) rabbitConfig(name string) rabbitmq.Config {
	return rabbitmq.Config{
		URL:            a.cfg.BrokerURL,
		RetryDelay:     a.cfg.RetryDelay,
		Prefetch:       a.cfg.Prefetch,
		ConnectionName: "herald " + name,
		Logger:         a.log.With("component", name),
	}
}

// apiParts builds what the api process runs: the HTTP server, the backlog
// monitor with its alert, and retention.
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
	serve := func(ctx context.Context) error { return serveHTTP(ctx, a.cfg.HTTPAddr, handler, a.log) }
	return []func(context.Context) error{serve, m.Run, r.Run}, nil
}

// newRelay builds the relay (broker transport only).
func (a *app) newRelay() (*relay.Relay, error) {
	pub, err := rabbitmq.NewPublisher(a.rabbitConfig("relay"))
	if err != nil {
		return nil, err
	}
	a.close = append(a.close, func() { _ = pub.Close() })
	return relay.New(a.st, pub, a.st, relay.Config{
		Batch:      a.cfg.RelayBatch,
		Interval:   a.cfg.RelayInterval,
		Logger:     a.log.With("component", "relay"),
		Registerer: a.reg,
	})
}

// newWorker builds the worker on the configured transport and sender.
func (a *app) newWorker() (*worker.Worker, error) {
	var src worker.Source
	if a.cfg.BrokerURL != "" {
		c, err := rabbitmq.NewConsumer(a.rabbitConfig("worker"))
		if err != nil {
			return nil, err
		}
		src = c
	} else {
		t, err := table.New(a.st, a.st, table.Config{
			Prefetch:     a.cfg.Prefetch,
			RetryDelay:   a.cfg.RetryDelay,
			PollInterval: a.cfg.RelayInterval,
			Logger:       a.log.With("component", "worker"),
		})
		if err != nil {
			return nil, err
		}
		src = t
	}
	var snd worker.Sender
	if a.cfg.SMTPURL != "" {
		s, err := smtp.New(smtp.Config{URL: a.cfg.SMTPURL, From: a.cfg.SMTPFrom, MaxIdle: a.cfg.Prefetch})
		if err != nil {
			return nil, err
		}
		a.close = append(a.close, func() { _ = s.Close() })
		snd = s
	} else {
		s, err := mbox.New(mboxPath)
		if err != nil {
			return nil, err
		}
		snd = s
	}
	crash, err := crashHook(a.cfg.DebugCrash, a.log)
	if err != nil {
		return nil, err
	}
	return worker.New(src, a.st, snd, worker.Config{
		From:       a.cfg.SMTPFrom,
		MaxRetries: a.cfg.MaxRetries,
		NoRetries:  a.cfg.MaxRetries == 0,
		Logger:     a.log.With("component", "worker"),
		Registerer: a.reg,
		Crash:      crash,
	})
}

// crashHook parses HERALD_DEBUG_CRASH (POINT[:N]) into a hook that kills the
// process with SIGKILL the N-th time the worker passes POINT: a crash that
// no deferred function or signal handler can soften.
func crashHook(spec string, log *slog.Logger) (func(string), error) {
	if spec == "" {
		return nil, nil
	}
	point, nth, _ := strings.Cut(spec, ":")
	if point != "after-send" && point != "after-commit" {
		return nil, fmt.Errorf("HERALD_DEBUG_CRASH: unknown point %q (want after-send or after-commit)", point)
	}
	n := int64(1)
	if nth != "" {
		v, err := strconv.ParseInt(nth, 10, 64)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("HERALD_DEBUG_CRASH: want POINT[:N] with N >= 1, got %q", spec)
		}
		n = v
	}
	var passes atomic.Int64
	return func(p string) {
		if p != point || passes.Add(1) != n {
			return
		}
		log.Error("debug crash: killing the process", "point", p, "pass", n)
		_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		select {} // never continue past the crash point
	}, nil
}

// serveHTTP serves h on addr until ctx ends, then shuts down gracefully.
func serveHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Info("listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down %s: %w", addr, err)
	}
	return nil
}

// redact drops the password from a URL for logs and errors.
func redact(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return url
	}
	if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return url
}
