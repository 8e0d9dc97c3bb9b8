//go:build !nobench

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/bench"
	"github.com/heraldhq/herald/internal/bench/raw"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/worker"
)

// benchOptions are herald bench's own flags.
type benchOptions struct {
	n, concurrency int
	warmup         int
	rate           float64
	json           bool
	cpuProfile     string
	smtpLatency    time.Duration
	channel        string
	recvLatency    time.Duration
	preload        int
	statsSettle    time.Duration
	findRate       bool
	find           bench.FindRateConfig
	broadcast      bool
	batchSize      int
	highRate       float64
}

// cmdBench is herald bench: the scratch objects and the provider, the raw
// ceilings before the stack starts, the stack warmed up, then the
// measurement the flags choose (a run, --find-rate or --broadcast).
func cmdBench(ctx context.Context, args []string, e env) (err error) {
	cfg, o, err := parseBenchFlags(args, e)
	if err != nil {
		return err
	}
	var cleanups []func() error
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanups[i]())
		}
	}()
	sc, err := newScratch(ctx, cfg, e)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, sc.cleanup...)
	fmt.Fprintf(e.stderr, "herald bench: working in %s (removed at the end)\n", sc.describe())
	target, err := benchTargets[o.channel](o)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, func() error { target.close(); return nil })
	target.configure(&sc.cfg)

	var (
		before    runBefore
		rawInsert float64
	)
	if o.broadcast {
		if rawInsert, before.notes, err = measureInsertCeiling(ctx, sc, o); err != nil {
			return err
		}
	} else if !o.findRate {
		if before.ceilings, before.notes, err = measureCeilings(ctx, sc, target, o); err != nil {
			return err
		}
	}

	if o.preload > 0 {
		start := time.Now()
		if err := sc.engine.bench.preload(ctx, sc.rawURL(), o.preload); err != nil {
			return fmt.Errorf("herald bench: %w", err)
		}
		fmt.Fprintf(e.stderr, "herald bench: preloaded %d sent notifications in %s\n", o.preload, time.Since(start).Round(time.Millisecond))
	}
	// The sequential scans are counted from before the stack starts to
	// after it stops: every connection reports its counts when it closes.
	before.seqScans = func() (map[string]int64, error) { return nil, nil }
	if sc.engine.bench.stats {
		before.seqScans = func() (map[string]int64, error) {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
			defer cancel()
			return raw.SeqScans(ctx, sc.rawURL())
		}
	}
	if before.scans, err = before.seqScans(); err != nil {
		return fmt.Errorf("herald bench: %w", err)
	}

	st, err := startBenchStack(ctx, sc, e)
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
	bcfg := benchConfig(sc, st, target, o, e)
	if before.warmedUp, err = warmUp(ctx, st, target, bcfg, o); err != nil {
		return err
	}
	if o.findRate {
		return findRate(ctx, sc, st, target, bcfg, o, e)
	}
	if o.broadcast {
		return broadcast(ctx, sc, st, target, bcfg, o, e, rawInsert, before.notes)
	}
	return measuredRun(ctx, sc, st, target, bcfg, o, e, before)
}

// parseBenchFlags parses herald bench's command line: the settings and the
// bench's own flags, checked.
func parseBenchFlags(args []string, e env) (Config, benchOptions, error) {
	var o benchOptions
	cfg, err := parseFlags("bench",
		"Loads the configured stack (HERALD_DATABASE_URL, HERALD_BROKER_URL) and measures it: herald's api, relay and\n"+
			"worker run in-process against the --channel's provider, in process too (an SMTP sink, a webhook receiver, a Bot API),\n"+
			"in a scratch database (PostgreSQL: herald_bench_<random>, dropped at the end; SQLite: a temporary file) and scratch\n"+
			"RabbitMQ names (bench-<random>.*, deleted at the end). The user's data is never touched. The raw ceilings of the\n"+
			"database, the broker and (webhook, telegram) the receiver are measured in the same run.",
		args, e, func(fs *flag.FlagSet) {
			fs.IntVar(&o.n, "n", 20000, "number of creates")
			fs.IntVar(&o.warmup, "warmup", 200, "creates sent and delivered before the measured run (connections, pools and SMTP sessions warm), not counted")
			fs.IntVar(&o.concurrency, "concurrency", 16, "concurrent HTTP clients (and clients of the raw transaction ceiling)")
			fs.Float64Var(&o.rate, "rate", 0, "fixed arrival rate in creates per second (open loop); 0: as fast as the clients can")
			fs.BoolVar(&o.json, "json", false, "print one JSON object")
			fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the pipeline run to this file")
			fs.DurationVar(&o.smtpLatency, "smtp-latency", 0, "--channel email: the SMTP sink answers each DATA after this `duration`, as a real provider does (50-500ms)")
			fs.StringVar(&o.channel, "channel", bench.ChannelEmail, "the channel of every create: email (to an in-process SMTP sink), webhook (to a receiver on loopback that checks each signature,\nunder a secret made for the run; 127.0.0.1 is opened to the SSRF guard) or telegram (to a receiver that speaks the Bot API);\nwebhook and telegram add the raw POST ceiling: as many POSTs of the same bodies straight to the receiver, as many at once as the worker sends")
			fs.DurationVar(&o.recvLatency, "receiver-latency", 0, "--channel webhook or telegram: the receiver answers each POST after this `duration`, as a real endpoint does")
			fs.IntVar(&o.preload, "preload", 0, "notifications already sent written into the scratch database (with their events, dedup rows and attempts, then analysed) before the run, as a deployment's history; "+preloadEngines()+" only")
			fs.DurationVar(&o.statsSettle, "stats-settle", 11*time.Second, "PostgreSQL: wait this `duration` after the warm-up before counting rows, commits and WAL, so that every connection has reported the warm-up's counts\n(PostgreSQL 15+ reports an idle connection's within 10s); 0: count at once, and the warm-up's unreported counts are taken for the run's")
			fs.BoolVar(&o.findRate, "find-rate", false, "search for the sustainable rate instead: the highest fixed arrival rate held for a window with delivered/s >= 0.95x the rate,\na backlog of at most 1s of arrivals at the window's end and e2e p99 < 1s; doubles the rate until a probe fails, then bisects to within 10%.\n--n and --rate do not apply; no raw ceilings are measured")
			fs.DurationVar(&o.find.Window, "find-window", time.Minute, "--find-rate: how long each probe sends at its rate")
			fs.Float64Var(&o.find.Start, "find-start", 100, "--find-rate: the first rate probed, per second")
			fs.DurationVar(&o.find.Budget, "find-timeout", 20*time.Minute, "--find-rate: bound on the whole search; when it runs out the search reports the bracket it has")
			fs.BoolVar(&o.broadcast, "broadcast", false, "a broadcast instead: --n bulk notifications (priority bulk) through POST /notifications/batch, --batch-size to a request, from --concurrency clients,\n"+
				"while high-priority notifications are created one at a time at --high-rate until the bulk is delivered; reports the acceptance against the raw insert ceiling\n"+
				"(the store's multi-row insert of as many rows, no HTTP), the drain, and the high ones' latency while bulk waited. --rate does not apply; no other raw ceilings are measured")
			fs.IntVar(&o.batchSize, "batch-size", bench.MaxBroadcastBatch, "--broadcast: creates per batch request (1 to 1000)")
			fs.Float64Var(&o.highRate, "high-rate", 10, "--broadcast: high-priority creates per second during the broadcast")
		})
	if err != nil {
		return cfg, o, err
	}
	return cfg, o, o.check(cfg)
}

// check rejects, as usage errors, flags out of range and flags that do not
// go together.
func (o benchOptions) check(cfg Config) error {
	switch {
	case o.n < 1:
		return usageError{fmt.Errorf("herald bench: --n: want at least 1, got %d", o.n)}
	case o.concurrency < 1:
		return usageError{fmt.Errorf("herald bench: --concurrency: want at least 1, got %d", o.concurrency)}
	case o.rate < 0:
		return usageError{fmt.Errorf("herald bench: --rate: want 0 or more, got %g", o.rate)}
	case o.warmup < 0:
		return usageError{fmt.Errorf("herald bench: --warmup: want 0 or more, got %d", o.warmup)}
	case o.smtpLatency < 0:
		return usageError{fmt.Errorf("herald bench: --smtp-latency: want 0 or more, got %s", o.smtpLatency)}
	case benchTargets[o.channel] == nil:
		return usageError{fmt.Errorf("herald bench: --channel: want one of %s, got %q", strings.Join(bench.Channels, ", "), o.channel)}
	case o.recvLatency < 0:
		return usageError{fmt.Errorf("herald bench: --receiver-latency: want 0 or more, got %s", o.recvLatency)}
	case o.smtpLatency > 0 && o.channel != bench.ChannelEmail:
		return usageError{fmt.Errorf("herald bench: --smtp-latency applies to --channel email; use --receiver-latency")}
	case o.recvLatency > 0 && o.channel == bench.ChannelEmail:
		return usageError{fmt.Errorf("herald bench: --receiver-latency applies to --channel webhook or telegram; use --smtp-latency")}
	case o.preload < 0:
		return usageError{fmt.Errorf("herald bench: --preload: want 0 or more, got %d", o.preload)}
	case o.preload > 0 && !canPreload(cfg.DatabaseURL):
		return usageError{fmt.Errorf("herald bench: --preload: supported on %s only", preloadEngines())}
	case o.statsSettle < 0:
		return usageError{fmt.Errorf("herald bench: --stats-settle: want 0 or more, got %s", o.statsSettle)}
	case o.findRate && (o.find.Window <= 0 || o.find.Budget <= 0 || o.find.Start <= 0):
		return usageError{fmt.Errorf("herald bench: --find-window, --find-timeout and --find-start: want them positive")}
	case o.broadcast && o.findRate:
		return usageError{fmt.Errorf("herald bench: --broadcast and --find-rate: choose one")}
	case o.broadcast && o.rate > 0:
		return usageError{fmt.Errorf("herald bench: --rate does not apply to --broadcast (its batches go as fast as the clients can; see --high-rate)")}
	case o.batchSize < 1 || o.batchSize > bench.MaxBroadcastBatch:
		return usageError{fmt.Errorf("herald bench: --batch-size: want 1 to %d, got %d", bench.MaxBroadcastBatch, o.batchSize)}
	case o.highRate < 0:
		return usageError{fmt.Errorf("herald bench: --high-rate: want 0 or more, got %g", o.highRate)}
	}
	return nil
}

// benchConfig is the measured run's configuration, on the started stack.
func benchConfig(sc *scratch, st *benchStack, target *benchTarget, o benchOptions, e env) bench.Config {
	// A delivery the transport lost track of (an SQS receive whose answer
	// never arrived, a row leased by a worker that died) comes back when its
	// row lease or visibility timeout runs out: the bench waits longer than
	// that before it calls the delivery stalled.
	_, rowLease := deliveryLeases(sc.cfg)
	return bench.Config{
		Stall:       rowLease + 30*time.Second,
		URL:         st.url,
		N:           o.n,
		Concurrency: o.concurrency,
		Rate:        o.rate,
		Channel:     target.channel,
		To:          target.to,
		Sink:        target.sink,
		Progress:    terminal(e),
	}
}

// warmUp sends --warmup creates through the stack as fast as the clients
// can, not counted: the recorder and the provider forget them. It returns
// how many were delivered.
func warmUp(ctx context.Context, st *benchStack, target *benchTarget, bcfg bench.Config, o benchOptions) (int, error) {
	if o.warmup <= 0 {
		return 0, nil
	}
	wcfg := bcfg
	wcfg.N, wcfg.Rate, wcfg.Progress = o.warmup, 0, nil
	wres, err := bench.Run(ctx, st.rec, wcfg)
	if err != nil {
		return 0, fmt.Errorf("herald bench: warm-up: %w", err)
	}
	st.rec.Reset()
	if target.reset != nil {
		target.reset()
	}
	return wres.Delivered, nil
}

// runBefore is what the measured run's report takes from before the run:
// the raw ceilings and their notes, the warm-up's deliveries, and the
// sequential scans counted before the stack started.
type runBefore struct {
	ceilings bench.Ceilings
	notes    []string
	warmedUp int
	seqScans func() (map[string]int64, error)
	scans    map[string]int64
}

// runCounters are the database's and the machine's counters of the
// measured run.
type runCounters struct {
	cpu      bench.CPUSplit
	cpuErr   error // why cpu was not measured
	conns    int64
	activity bench.Activity
	scans    map[string]int64 // the sequential scans after the stack stopped
}

// measuredRun runs herald bench's measured run on the started, warmed-up
// stack, with the database's counters around it, stops the stack and
// writes the report.
func measuredRun(ctx context.Context, sc *scratch, st *benchStack, target *benchTarget, bcfg bench.Config, o benchOptions, e env, before runBefore) (err error) {
	// The database's activity is counted from after the warm-up to after
	// the stack stopped (see raw.WatchActivity).
	stopActivity := func(context.Context) (bench.Activity, error) { return bench.Activity{}, nil }
	if sc.engine.bench.stats {
		if before.warmedUp > 0 && o.statsSettle > 0 {
			fmt.Fprintf(e.stderr, "herald bench: waiting %s for the warm-up's statistics to reach pg_stat\n", o.statsSettle)
			if !consume.Sleep(ctx, o.statsSettle) {
				return fmt.Errorf("herald bench: %w", ctx.Err())
			}
		}
		if stopActivity, err = raw.WatchActivity(ctx, sc.rawURL()); err != nil {
			return fmt.Errorf("herald bench: %w", err)
		}
	}
	stopSampler := func() (int64, error) { return 0, nil }
	if sc.engine.bench.stats {
		if stopSampler, err = raw.SampleConns(ctx, sc.server, sc.database, 20*time.Millisecond); err != nil {
			return fmt.Errorf("herald bench: %w", err)
		}
	}
	dbProcs := ""
	if sc.engine.bench.stats {
		dbProcs = "postgres"
	}
	var c runCounters
	cpu0, cpuErr := raw.ReadCPUClock(dbProcs)
	res, err := bench.Run(ctx, st.rec, bcfg)
	cpu1, cpuErr1 := raw.ReadCPUClock(dbProcs)
	conns, serr := stopSampler()
	c.conns = conns
	if target.check != nil && ctx.Err() == nil {
		// The provider's own account comes first: a bad signature also
		// shows as a delivery the sink misses.
		if cerr := target.check(res); cerr != nil {
			return errors.Join(cerr, err)
		}
	}
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("herald bench: connection sampler: %w", serr)
	}
	if err := st.stop(); err != nil {
		return fmt.Errorf("herald bench: stop the stack: %w", err)
	}
	c.activity, err = func() (bench.Activity, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
		defer cancel()
		return stopActivity(ctx)
	}()
	if err != nil {
		return fmt.Errorf("herald bench: %w", err)
	}
	if c.scans, err = before.seqScans(); err != nil {
		return fmt.Errorf("herald bench: %w", err)
	}
	if c.cpuErr = errors.Join(cpuErr, cpuErr1); c.cpuErr == nil {
		c.cpu = cpu1.Sub(cpu0)
	}
	report := runReport(sc, st, target, bcfg, o, res, before, c)
	if o.json {
		return report.WriteJSON(e.stdout)
	}
	return report.WriteText(e.stdout)
}

// runReport is the measured run's report: its figures, and notes on how
// each was counted.
func runReport(sc *scratch, st *benchStack, target *benchTarget, bcfg bench.Config, o benchOptions, res bench.Result, before runBefore, c runCounters) bench.Report {
	report := bench.NewReport(sc.engine.name, sc.tr.name, bcfg, res, before.ceilings)
	report.Preload = o.preload
	if c.cpuErr == nil {
		report.SetCPU(c.cpu)
		report.Notes = append(report.Notes, "cpu_*_ms split the machine's CPU over the measured run (from /proc): herald is this process (api, relay, worker, and the bench's clients and SMTP sink or receiver), database the PostgreSQL server's processes on this machine (SQLite and FerretDB run inside herald), broker RabbitMQ's or nats-server's processes; a database or broker on another machine is not counted")
	} else {
		report.Notes = append(report.Notes, "cpu_*_ms not measured: "+c.cpuErr.Error())
	}
	if sc.engine.bench.stats {
		report.SetActivity(c.activity)
		how := "pg_stat counts reported lazily are read exactly at the end (after every connection of the stack closed: a backend reports all it counted when it exits)"
		if before.warmedUp > 0 {
			how += fmt.Sprintf(", and at the start after %s without warm-up work (a PostgreSQL 15+ connection reports within 10s of going idle; 0 = at once, then some of the warm-up's counts may be in the run's)", o.statsSettle)
		}
		report.Notes = append(report.Notes, "rows, commits and WAL cover the measured run only: "+how+"; commits include the idle polls of the relay and the workers")
	} else {
		report.Notes = append(report.Notes, sc.engine.bench.unmeasured)
	}
	if deliveries := before.warmedUp + res.Delivered; sc.engine.bench.stats && deliveries > 0 {
		per1k := func(n int64) float64 { return math.Round(float64(n)*10000/float64(deliveries)) / 10 }
		var total int64
		parts := make([]string, 0, len(c.scans))
		for _, table := range slices.Sorted(maps.Keys(c.scans)) {
			n := c.scans[table] - before.scans[table]
			total += n
			parts = append(parts, fmt.Sprintf("%s %.1f", table, per1k(n)))
		}
		report.SeqScansPer1k = per1k(total)
		report.Notes = append(report.Notes, "seq_scans_per_1k_deliveries counts the warm-up's deliveries and scans too (pg_stat_user_tables, read before the stack started and after it stopped): "+strings.Join(parts, ", "))
	}
	if o.preload > 0 {
		report.Notes = append(report.Notes, fmt.Sprintf("the scratch database held %d notifications already sent (with their events, dedup rows and attempts), analysed, before the run", o.preload))
	}
	if target.channel == bench.ChannelEmail {
		report.SMTPLatencyMs = float64(target.latency) / float64(time.Millisecond)
	} else {
		report.ReceiverLatencyMs = float64(target.latency) / float64(time.Millisecond)
	}
	report.SendsInFlightMax = st.rec.SendsInFlightMax()
	report.DBConnsMax = c.conns
	if sc.engine.bench.connsNote != "" {
		report.Notes = append(report.Notes, sc.engine.bench.connsNote)
	}
	report.Notes = append(report.Notes, before.notes...)
	report.Notes = append(report.Notes, target.notes...)
	report.Notes = append(report.Notes, st.notes...)
	return report
}

// scratch is where a bench works: its own database (or file) and broker
// names, and the transport built on them.
type scratch struct {
	cfg      Config // the user's configuration pointed at the scratch objects
	tr       transport
	broker   benchBroker // the bench's own needs of the broker
	engine   storeEngine // the store engine's row
	database string      // the scratch database's name, or the scratch file's path
	server   string      // the database server, for counters of pg_stat_activity (serverURL of the user's configuration)
	prefix   string      // the scratch broker names
	cleanup  []func() error
}

// describe names the scratch objects for the user.
func (sc *scratch) describe() string {
	where := "scratch database " + sc.database
	if sc.engine.file {
		where = "scratch file " + sc.database
	}
	if sc.broker.remove != nil {
		where += " and scratch broker names " + sc.prefix + "*"
	}
	return where
}

// serverURL is the URL of the database server for counters that read
// pg_stat_activity: HERALD_DATABASE_DIRECT_URL when set (the sampler
// prepares its statement), else HERALD_DATABASE_URL.
func serverURL(cfg Config) string {
	if cfg.DatabaseDirectURL != "" {
		return cfg.DatabaseDirectURL
	}
	return cfg.DatabaseURL
}

// rawURL is the scratch database's URL for the raw ceilings and the
// database's counters: without the pooler when HERALD_DATABASE_DIRECT_URL
// says how (they measure the database, and use sessions: a search_path in
// the startup packet, prepared statements), else HERALD_DATABASE_URL's.
func (sc *scratch) rawURL() string {
	if sc.cfg.DatabaseDirectURL != "" {
		return sc.cfg.DatabaseDirectURL
	}
	return sc.cfg.DatabaseURL
}

// newScratch makes the scratch database (or file), migrates it, and picks
// the scratch broker prefix; its cleanup funcs remove both.
func newScratch(ctx context.Context, cfg Config, e env) (sc *scratch, err error) {
	sc = &scratch{cfg: cfg, server: serverURL(cfg), prefix: "bench-" + raw.Suffix() + "."}
	defer func() {
		if err != nil {
			for i := len(sc.cleanup) - 1; i >= 0; i-- {
				err = errors.Join(err, sc.cleanup[i]())
			}
		}
	}()
	var ok bool
	if sc.engine, ok = storeFor(cfg.DatabaseURL); !ok {
		return nil, unknownStore(cfg.DatabaseURL)
	}
	dbURL, database, drop, err := sc.engine.bench.scratch(ctx, cfg.DatabaseURL, strings.TrimSuffix(sc.prefix, "."))
	if err != nil {
		return nil, fmt.Errorf("herald bench: %w", err)
	}
	sc.cfg.DatabaseURL, sc.database = dbURL, database
	sc.cleanup = append(sc.cleanup, drop)
	// Behind a pooler: the scratch database without it too.
	if du, err := url.Parse(cfg.DatabaseDirectURL); err == nil && cfg.DatabaseDirectURL != "" && sc.engine.direct {
		if pu, err := url.Parse(dbURL); err == nil {
			du.Path = pu.Path
			sc.cfg.DatabaseDirectURL = du.String()
		}
	}
	// The bench's own API takes no token and injects no faults.
	sc.cfg.APIToken, sc.cfg.DebugFaults, sc.cfg.DebugCrash, sc.cfg.MaxBacklog = "", false, "", 0
	if sc.tr, err = newTransport(sc.cfg, slog.New(slog.NewTextHandler(e.stderr, nil)), sc.prefix); err != nil {
		return nil, err
	}
	if k, _ := transportFor(sc.cfg.BrokerURL); k.bench != nil {
		if sc.broker, err = k.bench(sc.cfg, sc.prefix); err != nil {
			return nil, err
		}
	}
	if sc.broker.remove != nil {
		sc.cleanup = append(sc.cleanup, func() error {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
			defer cancel()
			return sc.broker.remove(ctx)
		})
	}
	// The schema first: the raw PostgreSQL ceiling copies its tables.
	s, closeStore, err := openOneShot(ctx, sc.cfg, true)
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
func measureCeilings(ctx context.Context, sc *scratch, target *benchTarget, o benchOptions) (bench.Ceilings, []string, error) {
	var (
		c     bench.Ceilings
		notes []string
		err   error
	)
	txo := raw.TxOptions{N: o.n, Clients: o.concurrency}
	var note string
	c.TxPerSec, note, err = sc.engine.bench.tx(ctx, sc.rawURL(), txo)
	if note != "" {
		notes = append(notes, note)
	}
	if err != nil {
		return c, nil, fmt.Errorf("herald bench: raw transaction ceiling: %w", err)
	}
	if c.PipelinePerSec, err = rawPipeline(ctx, sc, o); err != nil {
		return c, nil, fmt.Errorf("herald bench: raw pipeline ceiling: %w", err)
	}
	if target.rawURL != "" {
		if c.POSTPerSec, c.POSTClients, err = target.rawPOST(ctx, sc.cfg, o.n); err != nil {
			return c, nil, fmt.Errorf("herald bench: raw POST ceiling: %w", err)
		}
		notes = append(notes, fmt.Sprintf("raw_post_per_s: %d POSTs of the run's bodies straight to the receiver, %d at once (the worker's most sends at once: HERALD_PREFETCH, "+
			"or HERALD_%s_CONCURRENCY when lower), over kept-alive connections, no signing, no SSRF guard, no herald", o.n, c.POSTClients, strings.ToUpper(target.channel)))
	}
	steps := "create, the table transport's claim, the worker's claim and record, the row's finish"
	if sc.tr.publisher != nil {
		steps = "create, the relay's claim and mark, the worker's claim and record"
	}
	notes = append(notes, fmt.Sprintf("raw_pipeline_per_s: %d notifications from %d clients, each through the store's own methods for %s, one notification per transaction, no HTTP, broker or SMTP; "+
		"herald groups the claims and records of concurrent deliveries (and the table transport claims up to its prefetch in one statement), so delivered_vs_raw_pipeline above 1 is what that grouping gains", o.n, o.concurrency, steps))
	if sc.broker.rawPublish == nil {
		notes = append(notes, sc.tr.name+" transport: no broker and no relay, so relay_per_s, raw_publish_per_s and relay_vs_raw_publish are 0")
		return c, notes, nil
	}
	if c.PublishPerSec, err = sc.broker.rawPublish(ctx, o.n); err != nil {
		return c, nil, fmt.Errorf("herald bench: raw publish ceiling: %w", err)
	}
	return c, notes, nil
}

// rawPipeline measures the raw pipeline ceiling on a store of its own, made
// by the builder on scratch tables beside the bench's (a schema of the
// scratch database, or a file beside the scratch file) and removed
// afterwards.
func rawPipeline(ctx context.Context, sc *scratch, o benchOptions) (_ float64, err error) {
	var (
		dbURL  string
		remove func() error
	)
	if dbURL, remove, err = sc.engine.bench.pipeline(ctx, sc.rawURL()); err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, remove()) }()
	// Status events as the stack writes them: they are statements herald
	// issues for a notification, or not.
	statusEvents, _ := writeStatusEvents(sc.cfg)
	s, closeStore, err := openStore(ctx, dbURL, "", o.concurrency, true, nil, statusEvents)
	if err != nil {
		return 0, err
	}
	defer closeStore()
	if err := s.Migrate(ctx); err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	return raw.Pipeline(ctx, s, raw.PipelineOptions{N: o.n, Clients: o.concurrency, Relay: sc.tr.publisher != nil})
}

// measureInsertCeiling measures the raw insert ceiling of --broadcast
// before the stack starts.
func measureInsertCeiling(ctx context.Context, sc *scratch, o benchOptions) (float64, []string, error) {
	io := raw.InsertOptions{N: o.n, Batch: o.batchSize, Clients: o.concurrency}
	r, note, err := sc.engine.bench.insert(ctx, sc.rawURL(), io)
	if err != nil {
		return 0, nil, fmt.Errorf("herald bench: raw insert ceiling: %w", err)
	}
	if note != "" {
		return 0, []string{note}, nil
	}
	return r, []string{fmt.Sprintf("raw_insert_per_s: %d notifications written by the store's own multi-row insert (each with its outbox event), %d to a statement, from %d clients, in scratch tables beside the run's; no HTTP, no JSON, no validation",
		o.n, o.batchSize, o.concurrency)}, nil
}

// broadcast runs herald bench --broadcast on the started, warmed-up stack.
func broadcast(ctx context.Context, sc *scratch, st *benchStack, target *benchTarget, bcfg bench.Config, o benchOptions, e env, rawInsert float64, notes []string) error {
	cfg := bench.BroadcastConfig{
		URL: bcfg.URL, N: o.n, BatchSize: o.batchSize, Concurrency: o.concurrency,
		Channel: bcfg.Channel, To: bcfg.To, HighRate: o.highRate,
		Stall: bcfg.Stall, Sink: bcfg.Sink, Progress: bcfg.Progress,
	}
	if o.highRate == 0 {
		cfg.HighRate = -1 // none; 0 would be the default rate
	}
	res, err := bench.Broadcast(ctx, st.rec, cfg)
	if target.check != nil && ctx.Err() == nil {
		if cerr := target.check(bench.Result{Accepted: res.Accepted + res.HighCreated}); cerr != nil {
			return errors.Join(cerr, err)
		}
	}
	if err != nil {
		return err
	}
	if err := st.stop(); err != nil {
		return fmt.Errorf("herald bench: stop the stack: %w", err)
	}
	report := bench.NewBroadcastReport(sc.engine.name, sc.tr.name, cfg, res, rawInsert)
	report.Notes = append(report.Notes, notes...)
	report.Notes = append(report.Notes, target.notes...)
	report.Notes = append(report.Notes, st.notes...)
	if o.json {
		return report.WriteJSON(e.stdout)
	}
	return report.WriteText(e.stdout)
}

// findRate runs herald bench --find-rate on the started, warmed-up stack.
func findRate(ctx context.Context, sc *scratch, st *benchStack, target *benchTarget, bcfg bench.Config, o benchOptions, e env) error {
	bcfg.Progress = nil
	probe := func(ctx context.Context, rate float64) (bench.Probe, error) {
		st.rec.Reset()
		pcfg := bcfg
		pcfg.Rate = rate
		pcfg.N = max(1, int(math.Ceil(rate*o.find.Window.Seconds())))
		fmt.Fprintf(e.stderr, "herald bench: probing %.1f/s for %s (%d creates)\n", rate, o.find.Window, pcfg.N)
		res, err := bench.Run(ctx, st.rec, pcfg)
		if err != nil {
			return bench.Probe{}, err
		}
		return bench.Judge(rate, res), nil
	}
	search, err := bench.FindRate(ctx, o.find, probe, func(p bench.Probe) {
		fmt.Fprintf(e.stderr, "herald bench: probe %s\n", p)
	})
	if err != nil {
		return fmt.Errorf("herald bench: %w", err)
	}
	search.Store, search.Transport, search.Channel, search.Concurrency = sc.engine.name, sc.tr.name, target.channel, bcfg.Concurrency
	search.Notes = append(search.Notes, target.notes...)
	search.Notes = append(search.Notes, st.notes...)
	search.Notes = append(search.Notes, fmt.Sprintf("open loop from %d clients: a rate they cannot send shows as a failing probe (raise --concurrency)", bcfg.Concurrency))
	if o.json {
		return search.WriteJSON(e.stdout)
	}
	return search.WriteText(e.stdout)
}

// benchStack is herald's api, relay and worker running in-process.
type benchStack struct {
	url   string
	rec   *bench.Recorder
	notes []string
	stop  func() error
}

// startBenchStack starts the pipeline on the scratch database and broker
// names, built by the same builder as the commands, with the recorder
// wrapped around the built publisher and sender. With a broker the api,
// relay and worker are three apps (three stores, three connection pools),
// as the separate processes of the production shape are; on the outbox
// table one app runs them all, as herald serve does.
func startBenchStack(ctx context.Context, sc *scratch, e env) (_ *benchStack, err error) {
	st := &benchStack{rec: bench.NewRecorder()}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	cfg := sc.cfg

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("herald bench: listen: %w", err)
	}
	closers = append(closers, func() { _ = ln.Close() })
	st.url = "http://" + ln.Addr().String()
	h := hooks{
		role:          "bench",
		prefix:        sc.prefix,
		quiet:         true,
		listener:      ln,
		wrapPublisher: func(p relay.Publisher) relay.Publisher { return st.rec.Publisher(p) },
		wrapSender:    func(s worker.Sender) worker.Sender { return st.rec.Sender(s) },
	}
	groups := [][]role{{roleAPI, roleRelay, roleWorker}}
	if sc.tr.publisher != nil {
		groups = [][]role{{roleAPI}, {roleRelay}, {roleWorker}}
		st.notes = append(st.notes, "api, relay and worker each have a store (connection pool) of their own, as separate processes would")
	}
	if write, _ := writeStatusEvents(cfg); write {
		st.notes = append(st.notes, "status events written (HERALD_STATUS_EVENTS="+cfg.StatusEvents+"): one outbox row more per notification, and its relay")
	} else {
		st.notes = append(st.notes, "no status events written (HERALD_STATUS_EVENTS="+cfg.StatusEvents+"): nobody would receive them; HERALD_STATUS_EVENTS=on counts them")
	}
	var parts []func(context.Context) error
	for _, roles := range groups {
		a, err := build(ctx, cfg, e, h, false)
		if err != nil {
			return nil, err
		}
		closers = append(closers, a.Close)
		p, err := a.parts(roles...)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p...)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runAll(runCtx, parts) }()
	// stop runs once: the bench stops the stack to count what it did, and
	// the clean-up calls stop again, which then does nothing.
	var once sync.Once
	st.stop = func() (err error) {
		once.Do(func() {
			cancel()
			err = <-done
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		})
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
