package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/tracing"
	"github.com/heraldhq/herald/internal/worker"
)

// This file is the one place that decides what runs with what: which store
// HERALD_DATABASE_URL names, which transport HERALD_BROKER_URL names, which
// sender HERALD_SMTP_URL names, and how the components are put together on
// them. Every command, herald bench included, gets its parts from build; a
// wrapper (bench's recorder) wraps built parts through hooks.

// mboxPath is where herald serve writes mail when HERALD_SMTP_URL is unset
// (the embedded default). Every other process needs HERALD_SMTP_URL, which
// may ask for an mbox file by name (mbox:PATH).
const mboxPath = "herald.mbox"

// mboxScheme prefixes an HERALD_SMTP_URL that writes mail to a file.
const mboxScheme = "mbox:"

// mailTarget returns the mbox file mail goes to (ok) or reports that
// HERALD_SMTP_URL names an SMTP server.
func mailTarget(cfg Config) (path string, ok bool) {
	switch {
	case cfg.SMTPURL == "":
		return mboxPath, true
	case strings.HasPrefix(cfg.SMTPURL, mboxScheme):
		return strings.TrimPrefix(cfg.SMTPURL, mboxScheme), true
	}
	return "", false
}

// hooks change how build puts the parts together without building any of
// them: herald bench uses them; the commands pass the zero value.
type hooks struct {
	// prefix is prepended to every broker object name.
	prefix string
	// quiet logs warnings and errors only, whatever HERALD_LOG_LEVEL says.
	quiet bool
	// listener, when set, is where the API serves instead of HERALD_HTTP_ADDR.
	listener net.Listener
	// wrapPublisher and wrapSender, when set, wrap the relay's publisher and
	// the worker's sender.
	wrapPublisher func(relay.Publisher) relay.Publisher
	wrapSender    func(worker.Sender) worker.Sender
	// role names the process in its traces' resource (herald.role).
	role string
}

// app is one herald process: its configuration, logger, metrics registry,
// store and transport, and what to close when it stops.
type app struct {
	cfg   Config
	log   *slog.Logger
	reg   *prometheus.Registry
	st    store
	tr    transport
	hooks hooks
	close []func()
	// tp is the process's tracer provider; nil while tracing is off (no
	// OTLP endpoint set), and then no part makes a span.
	tp trace.TracerProvider
	// checks are the readiness checks of the parts built so far (a relay
	// that stopped on a permanent error says so).
	checks []api.Check
	// statusEvents is whether the store writes status events (see
	// writeStatusEvents).
	statusEvents bool
}

// build opens the store and the transport cfg names; with migrate it also
// applies the migrations.
func build(ctx context.Context, cfg Config, e env, h hooks, migrate bool) (*app, error) {
	log := newLogger(cfg, e)
	if h.quiet {
		log = slog.New(tracing.NewLogHandler(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}
	tp, closeTracing, err := newTracerProvider(e.getenv, h.role)
	if err != nil {
		return nil, err
	}
	// The refusal of off with a status webhook is runProcess's, for the
	// processes that take both settings; here off writes none.
	statusEvents, _ := writeStatusEvents(cfg)
	tr, err := newTransport(cfg, log, h.prefix)
	if err != nil {
		closeTracing()
		return nil, err
	}
	if migrate && storeKind(cfg.DatabaseURL) == "sqlite" {
		if _, err := os.Stat(sqlitePath(cfg.DatabaseURL)); errors.Is(err, fs.ErrNotExist) {
			log.Info("creating a new SQLite database", "path", sqlitePath(cfg.DatabaseURL))
		}
	}
	st, closeStore, err := openStore(ctx, cfg.DatabaseURL, cfg.DatabaseDirectURL, poolSize(cfg), migrate, tp, statusEvents)
	if err != nil {
		closeTracing()
		return nil, err
	}
	// Closed last: the spans of the parts' last work are flushed.
	a := &app{cfg: cfg, log: log, st: st, tr: tr, hooks: h, tp: tp, close: []func(){closeTracing, closeStore}, statusEvents: statusEvents}
	check := checkMigrated
	if migrate {
		check = func(ctx context.Context, st store) error { return st.Migrate(ctx) }
	}
	if err := check(ctx, st); err != nil {
		a.Close()
		// The start-up record is not out yet: say which database.
		return nil, fmt.Errorf("database %s: %w", where(cfg.DatabaseURL), err)
	}
	if err := ensurePartitions(ctx, st, log); err != nil {
		a.Close()
		return nil, fmt.Errorf("database %s: %w", where(cfg.DatabaseURL), err)
	}
	logPooler(ctx, st, cfg, log)
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return a, nil
}

// logPooler says, for a PostgreSQL store behind a pooler in transaction
// mode, how the process's wake-ups and partition drops work through it
// (docs/production.md, "PostgreSQL through a pooler").
func logPooler(ctx context.Context, st store, cfg Config, log *slog.Logger) {
	p, ok := st.(interface {
		Pooled(context.Context) (bool, error)
	})
	if !ok {
		return
	}
	if pooled, err := p.Pooled(ctx); err != nil || !pooled {
		return
	}
	if cfg.DatabaseDirectURL != "" {
		log.Info("database behind a pooler: LISTEN and the drop of old outbox partitions use HERALD_DATABASE_DIRECT_URL",
			"direct", where(cfg.DatabaseDirectURL))
		return
	}
	log.Info("database behind a pooler and no HERALD_DATABASE_DIRECT_URL: relays and table workers poll every HERALD_RELAY_INTERVAL, old outbox partitions are kept",
		"HERALD_RELAY_INTERVAL", cfg.RelayInterval.String())
}

// Close releases what the app opened, newest first.
func (a *app) Close() {
	for i := len(a.close) - 1; i >= 0; i-- {
		a.close[i]()
	}
}

// role is one of the long-running parts of herald.
type role string

const (
	roleAPI    role = "api"
	roleRelay  role = "relay"
	roleWorker role = "worker"
)

// parts builds the long-running parts of the named roles. A relay is built
// only when the transport has one (serve on the outbox table runs none).
func (a *app) parts(roles ...role) ([]func(context.Context) error, error) {
	var out []func(context.Context) error
	for _, r := range roles {
		switch r {
		case roleAPI:
			p, err := a.apiParts()
			if err != nil {
				return nil, err
			}
			out = append(out, p...)
		case roleRelay:
			if a.tr.publisher == nil {
				continue
			}
			rls, err := a.newRelays()
			if err != nil {
				return nil, err
			}
			for _, rl := range rls {
				out = append(out, rl.Run)
			}
		case roleWorker:
			w, err := a.newWorker()
			if err != nil {
				return nil, err
			}
			out = append(out, w.Run)
			if a.tr.publisher == nil {
				// The outbox table has no relay for the notifications;
				// the status events get theirs where the workers run.
				// A worker that writes none only clears what an earlier
				// run left.
				rl, err := a.newStatusRelay(nil)
				if err != nil {
					return nil, err
				}
				if a.statusEvents {
					out = append(out, rl.Run)
				} else {
					out = append(out, drainStatus(rl, a.cfg.RelayBatch, a.cfg.RelayInterval))
				}
			}
		}
	}
	return out, nil
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
		return nil, usageError{fmt.Errorf("HERALD_DEBUG_CRASH: unknown point %q (want after-send or after-commit)", point)}
	}
	n := int64(1)
	if nth != "" {
		v, err := strconv.ParseInt(nth, 10, 64)
		if err != nil || v < 1 {
			return nil, usageError{fmt.Errorf("HERALD_DEBUG_CRASH: want POINT[:N] with N >= 1, got %q", spec)}
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

// newLogger is the process's logger as HERALD_LOG_FORMAT and
// HERALD_LOG_LEVEL ask (parseConfig has checked both).
func newLogger(cfg Config, e env) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // "" (a one-shot command) stays info
	// Every string and error logged has the configuration's secrets
	// masked, whatever part of herald or of a library wrote it.
	sc := newScrubber(configSecrets(cfg))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		switch v := a.Value.Any().(type) {
		case string:
			if t := sc.text(v); t != v {
				a.Value = slog.StringValue(t)
			}
		case error:
			if t := sc.text(v.Error()); t != v.Error() {
				a.Value = slog.StringValue(t)
			}
		}
		return a
	}}
	if cfg.LogFormat == "json" {
		return slog.New(tracing.NewLogHandler(slog.NewJSONHandler(e.stderr, opts)))
	}
	return slog.New(tracing.NewLogHandler(slog.NewTextHandler(e.stderr, opts)))
}

// configSecrets lists the values of cfg's settings for a scrubber.
func configSecrets(cfg Config) []secretSource {
	var out []secretSource
	for _, s := range settings {
		if _, ok := s.field(&cfg).(*string); ok {
			out = append(out, secretSource{value: settingText(&cfg, s), secret: s.secret})
		}
	}
	return out
}
