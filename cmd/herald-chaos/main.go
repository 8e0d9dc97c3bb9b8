// Command herald-chaos is herald's reliability harness (make chaos). For each
// transport it runs the real herald binaries against a scratch PostgreSQL
// database (and a scratch RabbitMQ vhost), loads them over HTTP as a careful
// client would, injects faults on a schedule (process kills, crashes inside
// the send-to-commit window, a broker restart, terminated database backends,
// network latency, resets and blackholes, SMTP refusals, poison and
// duplicate messages), waits for the drain and checks the guarantees from the
// database and the SMTP sink. Its last line sums up the run:
//
//	chaos: transport=T accepted=A delivered=D lost=L duplicates=U explained=E dead=X faults=F drain_s=S
//
// It exits non-zero when an invariant fails.
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
	"strconv"
	"syscall"
	"time"

	"github.com/heraldhq/herald/internal/proctest"
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
	transports   []string
	n            int
	clients      int
	seed         uint64
	keep         bool
	postgres     string
	amqp         string
	step         time.Duration
	drainTimeout time.Duration
	loadTimeout  time.Duration
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
	transport := fs.String("transport", "both", "rabbitmq, table or both")
	fs.IntVar(&o.n, "n", defN, "notifications to create (default from HERALD_CHAOS_N)")
	fs.IntVar(&o.clients, "clients", 16, "concurrent HTTP clients")
	seed := fs.Uint64("seed", 0, "random seed for the fault parameters (0: pick one and print it)")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch database, vhost and logs for debugging")
	fs.StringVar(&o.postgres, "postgres", defPG, "PostgreSQL admin URL; a scratch database is created beside it (HERALD_TEST_POSTGRES_URL)")
	fs.StringVar(&o.amqp, "amqp", defAMQP, "RabbitMQ URL; a scratch vhost is created on its broker (HERALD_TEST_AMQP_URL)")
	fs.DurationVar(&o.step, "step", 2*time.Second, "pause between two faults of the schedule")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 5*time.Minute, "longest wait for the drain once the faults stopped")
	fs.DurationVar(&o.loadTimeout, "load-timeout", 10*time.Minute, "longest the load may run; a notification not accepted by then counts as refused")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: herald-chaos [flags]\n\nRuns herald under load and faults and checks that nothing is lost or applied twice.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	switch *transport {
	case "both":
		o.transports = []string{"rabbitmq", "table"}
	case "rabbitmq", "table":
		o.transports = []string{*transport}
	default:
		return options{}, fmt.Errorf("--transport: want rabbitmq, table or both, got %q", *transport)
	}
	switch {
	case o.n < 1:
		return options{}, fmt.Errorf("--n: want at least 1, got %d", o.n)
	case o.clients < 1:
		return options{}, fmt.Errorf("--clients: want at least 1, got %d", o.clients)
	case o.step <= 0 || o.drainTimeout <= 0 || o.loadTimeout <= 0:
		return options{}, errors.New("--step, --drain-timeout and --load-timeout must be positive")
	}
	o.seed = *seed
	if o.seed == 0 {
		o.seed = rand.Uint64()
	}
	return o, nil
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
