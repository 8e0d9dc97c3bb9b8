package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/bench"
	"github.com/heraldhq/herald/internal/bench/raw"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/smtptest"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
	"github.com/heraldhq/herald/internal/transport/table"
	"github.com/heraldhq/herald/internal/worker"
)

// benchFlags are the settings herald bench takes: where the services are and
// what shapes the relay and the workers. The mail always goes to an
// in-process SMTP sink.
var benchFlags = join(storeFlags, []string{"broker-url", "relay-batch", "relay-interval", "prefetch", "retry-delay", "max-retries", "smtp-from"})

// benchCleanupTimeout bounds the clean-up of scratch objects, which runs even
// when the bench was interrupted.
const benchCleanupTimeout = 30 * time.Second

// benchOptions are herald bench's own flags.
type benchOptions struct {
	n, concurrency int
	warmup         int
	rate           float64
	json           bool
	cpuProfile     string
}

func cmdBench(ctx context.Context, args []string, e env) (err error) {
	var o benchOptions
	cfg, _, err := parseConfig("bench",
		"Loads the configured stack (HERALD_DATABASE_URL, HERALD_BROKER_URL) and measures it: herald's api, relay and\n"+
			"worker run in-process against an SMTP sink, in a scratch database (PostgreSQL: herald_bench_<random>, dropped\n"+
			"at the end; SQLite: a temporary file) and scratch RabbitMQ names (bench-<random>.*, deleted at the end).\n"+
			"The user's data is never touched. The raw ceilings of the database and the broker are measured in the same run.",
		args, e.getenv, e.stderr, func(fs *flag.FlagSet) {
			fs.IntVar(&o.n, "n", 20000, "number of creates")
			fs.IntVar(&o.warmup, "warmup", 200, "creates sent and delivered before the measured run (connections, pools and SMTP sessions warm), not counted")
			fs.IntVar(&o.concurrency, "concurrency", 16, "concurrent HTTP clients (and clients of the raw transaction ceiling)")
			fs.Float64Var(&o.rate, "rate", 0, "fixed arrival rate in creates per second (open loop); 0: as fast as the clients can")
			fs.BoolVar(&o.json, "json", false, "print one JSON object")
			fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the pipeline run to this file")
		}, benchFlags...)
	if err != nil {
		return err
	}
	switch {
	case o.n < 1:
		return fmt.Errorf("herald bench: --n: want at least 1, got %d", o.n)
	case o.concurrency < 1:
		return fmt.Errorf("herald bench: --concurrency: want at least 1, got %d", o.concurrency)
	case o.rate < 0:
		return fmt.Errorf("herald bench: --rate: want 0 or more, got %g", o.rate)
	case o.warmup < 0:
		return fmt.Errorf("herald bench: --warmup: want 0 or more, got %d", o.warmup)
	}

	var cleanups []func() error
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanups[i]())
		}
	}()
	sc, err := newScratch(ctx, cfg)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, sc.cleanup...)
	fmt.Fprintf(e.stderr, "herald bench: working in %s (removed at the end)\n", sc.describe())

	ceilings, notes, err := measureCeilings(ctx, sc, o)
	if err != nil {
		return err
	}

	st, err := startBenchStack(ctx, cfg, sc, e)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, st.stop)

	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		cleanups = append(cleanups, stop)
	}
	bcfg := bench.Config{
		URL:         st.url,
		N:           o.n,
		Concurrency: o.concurrency,
		Rate:        o.rate,
		Sink:        st.sink.CountByMessageID,
		Progress:    terminal(e),
	}
	if o.warmup > 0 {
		wcfg := bcfg
		wcfg.N, wcfg.Rate, wcfg.Progress = o.warmup, 0, nil
		if _, err := bench.Run(ctx, st.rec, wcfg); err != nil {
			return fmt.Errorf("herald bench: warm-up: %w", err)
		}
		st.rec.Reset()
	}
	res, err := bench.Run(ctx, st.rec, bcfg)
	if err != nil {
		return err
	}
	report := bench.NewReport(sc.store, sc.transport, bcfg, res, ceilings)
	report.Notes = append(report.Notes, notes...)
	report.Notes = append(report.Notes, st.notes...)
	if o.json {
		return report.WriteJSON(e.stdout)
	}
	return report.WriteText(e.stdout)
}

// scratch is where a bench works: its own database and broker names.
type scratch struct {
	store, transport string
	dbURL            string // HERALD_DATABASE_URL form of the scratch database
	sqlitePath       string // the scratch file (SQLite only)
	pgDatabase       string // the scratch database (PostgreSQL only)
	rabbit           rabbitmq.Config
	cleanup          []func() error
}

// describe names the scratch objects for the user.
func (sc *scratch) describe() string {
	where := "scratch file " + sc.sqlitePath
	if sc.store == "postgres" {
		where = "scratch database " + sc.pgDatabase
	}
	if sc.transport == "rabbitmq" {
		where += " and scratch broker names " + sc.rabbit.Prefix + "*"
	}
	return where
}

// newScratch makes the scratch database (or file) and picks the scratch
// RabbitMQ prefix; its cleanup funcs remove both.
func newScratch(ctx context.Context, cfg Config) (sc *scratch, err error) {
	sc = &scratch{transport: "table"}
	defer func() {
		if err != nil {
			for i := len(sc.cleanup) - 1; i >= 0; i-- {
				err = errors.Join(err, sc.cleanup[i]())
			}
		}
	}()
	switch u := cfg.DatabaseURL; {
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		sc.store = "postgres"
		dbURL, drop, err := raw.ScratchPostgres(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("herald bench: %w", err)
		}
		sc.dbURL = dbURL
		sc.cleanup = append(sc.cleanup, drop)
		if pu, err := url.Parse(dbURL); err == nil {
			sc.pgDatabase = strings.TrimPrefix(pu.Path, "/")
		}
	case strings.HasPrefix(u, "sqlite:"):
		sc.store = "sqlite"
		dir, err := os.MkdirTemp("", "herald-bench-")
		if err != nil {
			return nil, fmt.Errorf("herald bench: scratch directory: %w", err)
		}
		sc.cleanup = append(sc.cleanup, func() error { return os.RemoveAll(dir) })
		sc.sqlitePath = filepath.Join(dir, "herald.db")
		sc.dbURL = "sqlite:" + sc.sqlitePath
	default:
		return nil, fmt.Errorf("HERALD_DATABASE_URL must start with postgres:// or sqlite:, got %q", redact(u))
	}
	if cfg.BrokerURL != "" {
		sc.transport = "rabbitmq"
		sc.rabbit = rabbitmq.Config{
			URL:            cfg.BrokerURL,
			Prefix:         "bench-" + raw.Suffix() + ".",
			RetryDelay:     cfg.RetryDelay,
			Prefetch:       cfg.Prefetch,
			ConnectionName: "herald bench",
		}
		rc := sc.rabbit
		sc.cleanup = append(sc.cleanup, func() error {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
			defer cancel()
			if err := rabbitmq.Delete(ctx, rc); err != nil {
				return fmt.Errorf("delete scratch broker topology %s*: %w", rc.Prefix, err)
			}
			return nil
		})
	}
	// The schema first: the raw PostgreSQL ceiling copies its tables.
	s, closeStore, err := openStore(ctx, sc.dbURL, poolSize(cfg))
	if err != nil {
		return nil, err
	}
	defer closeStore()
	if err := s.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("herald bench: migrate the scratch database: %w", err)
	}
	return sc, nil
}

// measureCeilings runs the raw ceilings before the stack starts, so that
// nothing competes with them. It returns notes for what it could not
// measure.
func measureCeilings(ctx context.Context, sc *scratch, o benchOptions) (bench.Ceilings, []string, error) {
	var (
		c     bench.Ceilings
		notes []string
		err   error
	)
	txo := raw.TxOptions{N: o.n, Clients: o.concurrency}
	if sc.store == "postgres" {
		c.TxPerSec, err = raw.PostgresTx(ctx, sc.dbURL, txo)
	} else {
		c.TxPerSec, err = raw.SQLiteTx(ctx, sc.sqlitePath, txo)
	}
	if err != nil {
		return c, nil, fmt.Errorf("herald bench: raw transaction ceiling: %w", err)
	}
	if sc.transport == "rabbitmq" {
		c.PublishPerSec, err = raw.Publish(ctx, sc.rabbit.URL, raw.PublishOptions{Queue: sc.rabbit.Prefix + "raw", N: o.n})
		if err != nil {
			return c, nil, fmt.Errorf("herald bench: raw publish ceiling: %w", err)
		}
	} else {
		notes = append(notes, "table transport: no broker and no relay, so relay_per_s, raw_publish_per_s and relay_vs_raw_publish are 0")
	}
	return c, notes, nil
}

// benchStack is herald's api, relay and worker running in-process.
type benchStack struct {
	url   string
	sink  *smtptest.Server
	rec   *bench.Recorder
	notes []string
	stop  func() error
}

// startBenchStack starts the pipeline on the scratch database and broker
// names. With RabbitMQ each component gets a store of its own, as the
// separate api, relay and worker processes of the production shape have;
// with the table transport they share one, as herald serve does.
func startBenchStack(ctx context.Context, cfg Config, sc *scratch, e env) (_ *benchStack, err error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	open := func() (store, error) {
		s, c, err := openStore(ctx, sc.dbURL, poolSize(cfg))
		if err != nil {
			return nil, err
		}
		closers = append(closers, c)
		return s, nil
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg := prometheus.NewRegistry()
	st := &benchStack{rec: bench.NewRecorder()}

	apiStore, err := open()
	if err != nil {
		return nil, err
	}
	workerStore, relayStore := apiStore, apiStore
	if sc.transport == "rabbitmq" {
		if workerStore, err = open(); err != nil {
			return nil, err
		}
		if relayStore, err = open(); err != nil {
			return nil, err
		}
		st.notes = append(st.notes, "api, relay and worker each have a store (connection pool) of their own, as separate processes would")
	}

	sink, err := smtptest.New()
	if err != nil {
		return nil, fmt.Errorf("herald bench: start the SMTP sink: %w", err)
	}
	closers = append(closers, sink.Close)
	st.sink = sink
	snd, err := smtp.New(smtp.Config{URL: sink.URL(), From: cfg.SMTPFrom, MaxIdle: cfg.Prefetch})
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = snd.Close() })

	h, err := api.New(apiStore, api.Config{Registerer: reg, Logger: log.With("component", "api")})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("herald bench: listen: %w", err)
	}
	st.url = "http://" + ln.Addr().String()
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}

	var src worker.Source
	var rl *relay.Relay
	if sc.transport == "rabbitmq" {
		c, err := rabbitmq.NewConsumer(sc.rabbit)
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		src = c
		pub, err := rabbitmq.NewPublisher(sc.rabbit)
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		closers = append(closers, func() { _ = pub.Close() })
		rl, err = relay.New(relayStore, st.rec.Publisher(pub), relayStore, relay.Config{
			Batch:      cfg.RelayBatch,
			Interval:   cfg.RelayInterval,
			Logger:     log.With("component", "relay"),
			Registerer: reg,
		})
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
	} else {
		t, err := table.New(workerStore, workerStore, table.Config{
			Prefetch:     cfg.Prefetch,
			RetryDelay:   cfg.RetryDelay,
			PollInterval: cfg.RelayInterval,
			Logger:       log.With("component", "worker"),
		})
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		src = t
	}
	w, err := worker.New(src, workerStore, st.rec.Sender(snd), worker.Config{
		From:       cfg.SMTPFrom,
		MaxRetries: cfg.MaxRetries,
		Logger:     log.With("component", "worker"),
		Registerer: reg,
	})
	if err != nil {
		_ = ln.Close()
		return nil, err
	}

	runCtx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve the API: %w", err)
		}
		return nil
	})
	g.Go(func() error { return w.Run(gctx) })
	if rl != nil {
		g.Go(func() error { return rl.Run(gctx) })
	}
	g.Go(func() error {
		<-gctx.Done()
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("shut down the API: %w", err)
		}
		return nil
	})
	st.stop = func() error {
		cancel()
		err := g.Wait()
		closeAll()
		return err
	}
	return st, nil
}

// startCPUProfile profiles the process until the returned func is called.
func startCPUProfile(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("herald bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("herald bench: cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("write cpu profile %s: %w", path, err)
		}
		return nil
	}, nil
}

// terminal returns the command's stderr when it is a terminal, for the
// progress display; nil otherwise, so that logs and pipes stay clean.
func terminal(e env) io.Writer {
	f, ok := e.stderr.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return f
}
