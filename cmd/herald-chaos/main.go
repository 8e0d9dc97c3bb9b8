// Command herald-chaos is herald's reliability harness (make chaos). For each
// transport it runs the real herald binaries against a scratch PostgreSQL
// database and a broker of its own (a RabbitMQ node, a nats-server, an
// in-process kfake Kafka cluster, goaws; the table transport needs none; the
// mongodb run is the table transport on the MongoDB store, served by a
// FerretDB process of the harness's own over the scratch database), loads them
// over HTTP as a careful client would (a third of the notifications are
// webhooks to a receiver in the harness that checks their signatures, the rest
// email), injects faults on a schedule (process kills, crashes inside the
// send-to-commit window, a broker restart or a killed queue leader, terminated
// database backends, the database's primary killed and its standby promoted
// (on a primary and a standby of the harness's own), network latency, resets, blackholes and a broker that
// accepts TCP and never answers, a purged send queue, a deleted retry queue,
// SMTP refusals, an SMTP server throttling (421 to MAIL) and one hanging past
// the lease, a few notifications whose data makes the SMTP server drop the
// connection, poison and duplicate messages, a webhook receiver failing for a
// while, FerretDB killed and restarted, one webhook endpoint of 20 and the
// SMTP server each made a black hole while the others' delivered/s is
// measured), waits for the drain and checks the
// guarantees from the database, the broker, the SMTP sink and the webhook
// receiver. It times every SIGTERM it sends (restarts, and the stop of every
// process at the end) and fails a process that needs more than 10s to exit.
// Each transport's last line sums up its run:
//
//	chaos: transport=T accepted=A delivered=D lost=L duplicates=U explained=E dead=X faults=F drain_s=S sigterms=K sigterm_p50_s=P sigterm_max_s=M accepted_email=A1 lost_email=L1 duplicates_email=U1 accepted_webhook=A2 lost_webhook=L2 duplicates_webhook=U2
//
// The totals cover both channels; the _email and _webhook fields split
// them. A RabbitMQ cluster run (HERALD_CHAOS_CLUSTER=1, or the transport
// rabbitmq-cluster) adds nodes=3 to its line. A run on a PostgreSQL of its
// own (--pg: a primary and a standby, synchronous by default) adds its
// topology, and the pg-failover fault's figures: the seconds from the
// primary's death to the first 201 of a create sent after it, and the
// creates answered other than 201 before that (pg=P failover_s=S
// failover_refused=R). It exits non-zero when an invariant fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heraldhq/herald/internal/testkit/proctest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "herald-chaos:", err)
		os.Exit(1)
	}
}

// options is the parsed command line.
type options struct {
	// transports are the runs, in order, named as in chaosRuns.
	transports []string
	// sharedRabbit runs RabbitMQ on a scratch vhost of the --amqp broker
	// (restarted with the machine's rabbitmqctl) instead of a node of the
	// harness's own.
	sharedRabbit bool
	n            int
	clients      int
	seed         uint64
	keep         bool
	postgres     string
	amqp         string
	step         time.Duration
	drainTimeout time.Duration
	// mongoDrainTimeout is the drain's bound on the mongodb run: longer,
	// as FerretDB v1 reads the whole collection for each claim; an
	// explicit --drain-timeout sets it too.
	mongoDrainTimeout time.Duration
	loadTimeout       time.Duration
	// outageSpan is how long endpoint-blackhole and channel-outage last,
	// and the baseline each measures first.
	outageSpan time.Duration
	// skipFaults are the faults left out of the schedule: FAULT on every
	// transport, TRANSPORT:FAULT on one.
	skipFaults []string
	// onlyFaults, when set, are the only faults of the schedule (by first
	// word).
	onlyFaults []string
	// pg is the database's topology: shared, sync, async or pgbouncer
	// (see pgfailover.go).
	pg string
}

// skips reports whether --skip-faults leaves the fault out on transport. A
// fault is named as the schedule names it, or by its first word ("kill-9"
// for every kill).
func (o options) skips(transport, fault string) bool {
	first, _, _ := strings.Cut(fault, " ")
	for _, s := range o.skipFaults {
		t, f, ok := strings.Cut(s, ":")
		if !ok {
			t, f = "", s
		}
		if (t == "" || t == transport) && (f == fault || f == first) {
			return true
		}
	}
	return false
}

const (
	defaultPostgres = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultAMQP     = "amqp://guest:guest@127.0.0.1:5672/"
)

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("herald-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defN := 5000
	if v := os.Getenv("HERALD_CHAOS_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return options{}, fmt.Errorf("HERALD_CHAOS_N: want a positive integer, got %q", v)
		}
		defN = n
	}
	defPG := envOr("HERALD_TEST_POSTGRES_URL", defaultPostgres)
	defAMQP := envOr("HERALD_TEST_AMQP_URL", defaultAMQP)
	var o options
	defTransports := envOr("HERALD_CHAOS_TRANSPORTS", strings.Join(allTransports, ","))
	transport := fs.String("transport", defTransports, "comma-separated transports: "+strings.Join(knownTransports, ", ")+`, all or both (rabbitmq,table) (HERALD_CHAOS_TRANSPORTS)`)
	fs.BoolVar(&o.sharedRabbit, "shared-rabbitmq", false, "run RabbitMQ on a scratch vhost of the --amqp broker, restarted with rabbitmqctl stop_app, instead of a node of the harness's own")
	fs.IntVar(&o.n, "n", defN, "notifications to create (default from HERALD_CHAOS_N)")
	fs.IntVar(&o.clients, "clients", 16, "concurrent HTTP clients")
	seed := fs.Uint64("seed", 0, "random seed for the fault parameters (0: pick one and print it)")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch database, vhost and logs for debugging")
	fs.StringVar(&o.postgres, "postgres", defPG, "PostgreSQL admin URL; a scratch database is created beside it (HERALD_TEST_POSTGRES_URL)")
	fs.StringVar(&o.amqp, "amqp", defAMQP, "RabbitMQ URL; a scratch vhost is created on its broker (HERALD_TEST_AMQP_URL)")
	fs.DurationVar(&o.step, "step", 2*time.Second, "pause between two faults of the schedule")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 5*time.Minute, "longest wait for the drain once the faults stopped (mongodb: 15m unless set)")
	fs.DurationVar(&o.loadTimeout, "load-timeout", 10*time.Minute, "longest the load may run; a notification not accepted by then counts as refused")
	fs.DurationVar(&o.outageSpan, "outage-span", 20*time.Second, "how long endpoint-blackhole and channel-outage last, after a baseline of the same span")
	only := fs.String("faults", "", "comma-separated faults the schedule is limited to (e.g. pg-failover); default every fault")
	fs.StringVar(&o.pg, "pg", envOr("HERALD_CHAOS_PG", pgSync), "the database: shared (a scratch database on --postgres), sync (a primary and a synchronous standby of the run's own; adds pg-failover), async (the same, an asynchronous standby), pgbouncer (sync, through a PgBouncer in front of each server) (HERALD_CHAOS_PG)")
	skip := fs.String("skip-faults", "", "comma-separated faults to leave out of the schedule: FAULT on every transport, TRANSPORT:FAULT on one (e.g. rabbitmq:smtp-throttle)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: herald-chaos [flags]\n\nRuns herald under load and faults and checks that nothing is lost or applied twice.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	ts, err := parseTransports(*transport)
	if err != nil {
		return options{}, err
	}
	for _, r := range chaosRuns() {
		if r.env != "" && os.Getenv(r.env) == "1" && !slices.Contains(ts, r.name) {
			ts = append(ts, r.name)
		}
	}
	o.transports = ts
	o.mongoDrainTimeout = 15 * time.Minute
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "drain-timeout" {
			o.mongoDrainTimeout = o.drainTimeout
		}
	})
	for _, f := range strings.Split(*skip, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		t, fault, ok := strings.Cut(f, ":")
		if !ok {
			fault = f
		} else if !slices.Contains(knownTransports, t) {
			return options{}, fmt.Errorf("--skip-faults: unknown transport %q in %q", t, f)
		}
		if !slices.Contains(knownFaults, faultOf(fault)) {
			return options{}, fmt.Errorf("--skip-faults: unknown fault %q in %q (known: %s)", fault, f, strings.Join(knownFaults, ", "))
		}
		o.skipFaults = append(o.skipFaults, f)
	}
	for _, f := range strings.Split(*only, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(knownFaults, f) {
			return options{}, fmt.Errorf("--faults: unknown fault %q (known: %s)", f, strings.Join(knownFaults, ", "))
		}
		o.onlyFaults = append(o.onlyFaults, f)
	}
	if !slices.Contains(pgTopologies, o.pg) {
		return options{}, fmt.Errorf("--pg: want one of %s, got %q", strings.Join(pgTopologies, ", "), o.pg)
	}
	switch {
	case o.n < 1:
		return options{}, fmt.Errorf("--n: want at least 1, got %d", o.n)
	case o.clients < 1:
		return options{}, fmt.Errorf("--clients: want at least 1, got %d", o.clients)
	case o.step <= 0 || o.drainTimeout <= 0 || o.loadTimeout <= 0 || o.outageSpan <= 0:
		return options{}, errors.New("--step, --drain-timeout, --load-timeout and --outage-span must be positive")
	}
	o.seed = *seed
	if o.seed == 0 {
		o.seed = rand.Uint64()
	}
	return o, nil
}

// allTransports are the runs of a plain `make chaos`: every run of
// chaosRuns but those an environment variable adds (the cluster run,
// HERALD_CHAOS_CLUSTER=1).
var allTransports = runNames(false)

// knownTransports are the names --transport takes.
var knownTransports = runNames(true)

// parseTransports reads a comma-separated list of transports; "all" and
// "both" (rabbitmq,table, the older spelling) stand for theirs.
func parseTransports(list string) ([]string, error) {
	var out []string
	add := func(t string) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	for _, t := range strings.Split(list, ",") {
		switch t = strings.TrimSpace(t); {
		case t == "":
		case t == "all":
			for _, a := range allTransports {
				add(a)
			}
		case transportAliases[t] != nil:
			for _, a := range transportAliases[t] {
				add(a)
			}
		case slices.Contains(knownTransports, t):
			add(t)
		default:
			return nil, fmt.Errorf("--transport: want a comma-separated list of %s (or all), got %q", strings.Join(knownTransports, ", "), t)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--transport: no transport named")
	}
	return out, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// run is the whole command; main and the tests call it. It runs every
// transport asked for, even after one failed, and fails when any did.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "herald-chaos: seed=%d n=%d clients=%d transports=%v\n", o.seed, o.n, o.clients, o.transports)
	bin, cleanBin, err := proctest.Build(ctx)
	if err != nil {
		return err
	}
	defer cleanBin()
	var errs []error
	for i, t := range o.transports {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		// Each transport gets its own seed stream, reproducible from --seed.
		rng := rand.New(rand.NewPCG(o.seed, uint64(i)))
		if err := runTransport(ctx, o, t, bin, rng, stdout, stderr); err != nil {
			errs = append(errs, fmt.Errorf("transport %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}
