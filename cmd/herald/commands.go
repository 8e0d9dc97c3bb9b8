package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/heraldhq/herald/internal/retention"
)

func cmdServe(ctx context.Context, args []string, e env) error {
	cfg, err := parseFlags("serve", "Runs api + relay + worker + monitor in one process. Migrates the database at start.",
		args, e, nil)
	if err != nil {
		return err
	}
	if err := guardDefaultDatabase("serve", cfg, e, databaseFlagGiven(args, e)); err != nil {
		return err
	}
	return runProcess(ctx, "serve", cfg, e, true, roleAPI, roleRelay, roleWorker)
}

// runProcess builds the app of one process (the command cmd) and runs the
// parts of roles (plus the own /metrics listener of a relay or worker, and
// the watch of its database and broker) until ctx ends.
func runProcess(ctx context.Context, cmd string, cfg Config, e env, migrate bool, roles ...role) error {
	// Every setting is checked before anything is opened: a bad one
	// leaves no database file, mbox or broker name behind.
	if err := checkProcess(cfg, roles); err != nil {
		return err
	}
	// Before anything is opened: a misspelt variable may be why what
	// follows fails.
	for _, u := range unknownVariableList(e.environment()) {
		newLogger(cfg, e).Warn(u.String())
	}
	if e.warned != nil {
		*e.warned = true
	}
	a, err := build(ctx, cfg, e, hooks{role: roleNames(roles)}, migrate)
	if err != nil {
		return err
	}
	defer a.Close()
	if cfg.DebugFaults {
		a.log.Warn("HERALD_DEBUG_FAULTS=1: fault injection is on (X-Herald-Fault header, HERALD_DEBUG_CRASH); never in production")
	}
	parts, err := a.parts(roles...)
	if err != nil {
		return err
	}
	if !hasRole(roles, roleAPI) {
		m, err := a.metricsParts()
		if err != nil {
			return err
		}
		parts = append(parts, m...)
	}
	parts = append(parts, a.watchParts(roles)...)
	report, err := a.reporterPart(roles)
	if err != nil {
		return err
	}
	parts = append(parts, report)
	if len(roles) > 1 {
		a.logStartup(e.stderr)
	}
	a.log.Info("starting", startupRecord(cmd, cfg, roles, a.tr.name)...)
	stopping := context.AfterFunc(ctx, func() {
		a.log.Info("shutting down: finishing deliveries in flight, handing back the rest (a second signal exits at once)")
	})
	defer stopping()
	err = runAll(ctx, parts)
	if ctx.Err() != nil {
		a.log.Info("stopped")
	}
	return err
}

// roleNames names a process by its roles: "api", or "api+relay+worker"
// for serve.
func roleNames(roles []role) string {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	return strings.Join(names, "+")
}

func hasRole(roles []role, r role) bool {
	for _, x := range roles {
		if x == r {
			return true
		}
	}
	return false
}

// senderKind names the sender HERALD_SMTP_URL picks, for logs.
func senderKind(cfg Config) string {
	if path, ok := mailTarget(cfg); ok {
		return "mbox " + path
	}
	return "smtp " + redact(cfg.SMTPURL)
}

// logStartup prints, once, a short block saying what serve uses, where its
// API and console are, the channels it accepts, and which variables switch
// it to the production parts or enable the other channels.
func (a *app) logStartup(w io.Writer) {
	c := a.cfg
	store, transport, mail := describeStore(c.DatabaseURL, redact, false), a.tr.name+" "+redact(c.BrokerURL)+" (relay + worker)", "SMTP "+redact(c.SMTPURL)
	if a.tr.publisher == nil {
		transport = "outbox table (no broker)"
	}
	if path, ok := mailTarget(c); ok {
		mail = "mbox file " + path
	}
	base := localURL(c.HTTPAddr)
	console := base + "/ui"
	if c.APIToken != "" {
		console += " (log in with HERALD_API_TOKEN)"
	}
	var enabled, enable []string
	for _, k := range channelKinds {
		if k.enabled == nil || k.enabled(c) {
			enabled = append(enabled, k.name)
		} else {
			enable = append(enable, k.enabledBy+"=... for "+k.name)
		}
	}
	rows := [][2]string{
		{"api", base},
		{"console", console},
		{"store", store + "\tHERALD_DATABASE_URL=postgres://... for PostgreSQL"},
		{"transport", transport + "\tHERALD_BROKER_URL=amqp://... for RabbitMQ"},
		{"mail", mail + "\tHERALD_SMTP_URL=smtp://host:port for a real SMTP server"},
		{"channels", strings.Join(enabled, ", ") + "\t" + strings.Join(enable, ", ")},
	}
	fmt.Fprintln(w, "herald serve")
	for _, r := range rows {
		value, hint, _ := strings.Cut(r[1], "\t")
		line := fmt.Sprintf("  %-10s %-34s %s", r[0], value, hint)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

// localURL is the URL a browser on this machine opens to reach a listener
// on addr: one on every interface (":8080", "0.0.0.0:8080") is reached at
// localhost.
func localURL(addr string) string {
	if allInterfaces(addr) {
		if _, port, err := net.SplitHostPort(addr); err == nil {
			addr = net.JoinHostPort("localhost", port)
		}
	}
	return "http://" + addr
}

func cmdAPI(ctx context.Context, args []string, e env) error {
	return runRole(ctx, args, e, roleAPI, "Serves the HTTP API, /metrics, the backlog monitor and alert.", nil)
}

func cmdRelay(ctx context.Context, args []string, e env) error {
	return runRole(ctx, args, e, roleRelay, "Publishes outbox events to the broker; marks a row only after the broker confirmed it.",
		func(cfg Config) error {
			if brokerKind(cfg.BrokerURL) == "table" {
				return errors.New("herald relay needs HERALD_BROKER_URL: without a broker, workers read the outbox table and no relay runs")
			}
			return nil
		})
}

func cmdWorker(ctx context.Context, args []string, e env) error {
	return runRole(ctx, args, e, roleWorker, "Delivers notifications from the broker (or the outbox table) to the sender.",
		func(cfg Config) error {
			if cfg.SMTPURL == "" {
				// Only the embedded default (herald serve) writes mail to a
				// file unasked: a production worker that marked mail sent
				// into a file nobody reads would lose it silently.
				return errors.New("HERALD_SMTP_URL is unset: a worker needs a mail server (smtp://host:port or smtps://...); to write mail to a file on purpose, set HERALD_SMTP_URL=mbox:PATH")
			}
			return nil
		})
}

// runRole is herald api, relay or worker: the command of one role, named
// after it and described by summary, run until ctx ends. refuse, when set,
// says why the configuration cannot run the role: a usage error.
func runRole(ctx context.Context, args []string, e env, r role, summary string, refuse func(Config) error) error {
	cfg, err := parseFlags(string(r), summary, args, e, nil)
	if err != nil {
		return err
	}
	if refuse != nil {
		if err := refuse(cfg); err != nil {
			return usageError{err}
		}
	}
	return runProcess(ctx, string(r), cfg, e, false, r)
}

// runAll runs the long-running parts of a process until ctx ends or one of
// them fails, which stops the others; it returns after all have returned.
func runAll(ctx context.Context, parts []func(context.Context) error) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, run := range parts {
		g.Go(func() error { return run(gctx) })
	}
	return g.Wait()
}

func cmdMigrate(ctx context.Context, args []string, e env) error {
	if len(args) > 0 && args[0] == "status" {
		return cmdMigrateStatus(ctx, args[1:], e)
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return usageError{fmt.Errorf("migrate: unknown subcommand %q%s (run 'herald migrate --help')", args[0], didYouMean(args[0], []string{"status"}, "migrate %s"))}
	}
	cfg, err := parseFlags("migrate", "Applies the embedded migrations and says which it applied. Running it twice changes nothing.\n'herald migrate status' lists the applied and pending ones.",
		args, e, nil)
	if err != nil {
		return err
	}
	if err := guardDefaultDatabase("migrate", cfg, e, databaseFlagGiven(args, e)); err != nil {
		return err
	}
	// Said before anything changes: which database this is, and whether a
	// new SQLite file is about to appear.
	fmt.Fprintf(e.stderr, "migrate: database %s\n", describeDatabase(cfg.DatabaseURL))
	st, closeStore, err := openOneShot(ctx, cfg, true)
	if err != nil {
		return err
	}
	defer closeStore()
	before, err := st.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	after, err := st.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	applied := 0
	for i, s := range after {
		if s.Applied && (i >= len(before) || !before[i].Applied) {
			fmt.Fprintf(e.stdout, "applied %s\n", s)
			applied++
		}
	}
	if applied == 0 {
		fmt.Fprintf(e.stdout, "nothing to apply: all %d migrations were applied already\n", len(after))
	}
	return nil
}

func cmdMigrateStatus(ctx context.Context, args []string, e env) error {
	cfg, err := parseFlags("migrate status", "Lists every migration this binary ships, applied (with when) or pending. Changes nothing.", args, e, nil)
	if err != nil {
		return err
	}
	st, closeStore, err := openOneShot(ctx, cfg, false)
	if err != nil {
		return err
	}
	defer closeStore()
	states, err := st.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tSTATUS\tAPPLIED_AT")
	pending := 0
	for _, s := range states {
		status, at := "applied", s.AppliedAt.UTC().Format(time.RFC3339)
		switch {
		case !s.Applied:
			status, at = "pending", ""
			pending++
		case s.Unknown:
			status = "applied (unknown to this binary: a newer herald migrated the database)"
		}
		fmt.Fprintf(tw, "%04d\t%s\t%s\t%s\n", s.Version, s.Name, status, at)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if pending > 0 {
		fmt.Fprintf(e.stderr, "%d pending: run `herald migrate`\n", pending)
	}
	return nil
}

func cmdOutbox(ctx context.Context, args []string, e env) error {
	return subcommands(ctx, args, e, "Usage: herald outbox stats [--json] | herald outbox prune [--retention DURATION]\n\nRun 'herald outbox SUBCOMMAND --help' for its flags.",
		map[string]func(context.Context, []string, env) error{"stats": cmdOutboxStats, "prune": cmdOutboxPrune})
}

func cmdOutboxStats(ctx context.Context, args []string, e env) error {
	var asJSON bool
	cfg, err := parseFlags("outbox stats", "Prints the backlog (the due unprocessed outbox rows), how long the one due the longest has been due, and the rows scheduled for later (counted up to 10000).",
		args, e, func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print one JSON object {unprocessed, oldest_seconds, scheduled, scheduled_capped}")
		})
	if err != nil {
		return err
	}
	st, closeStore, err := openMigrated(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	s, err := st.OutboxStats(ctx) // its error says "outbox stats"
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(map[string]any{
			"unprocessed":      s.Unprocessed,
			"oldest_seconds":   s.OldestAge.Seconds(),
			"scheduled":        s.Scheduled,
			"scheduled_capped": s.ScheduledCapped,
		})
	}
	scheduled := fmt.Sprint(s.Scheduled)
	if s.ScheduledCapped {
		scheduled += "+"
	}
	fmt.Fprintf(e.stdout, "unprocessed     %d\noldest_seconds  %.3f\nscheduled       %s\n", s.Unprocessed, s.OldestAge.Seconds(), scheduled)
	return nil
}

func cmdOutboxPrune(ctx context.Context, args []string, e env) error {
	cfg, err := parseFlags("outbox prune", "Deletes processed outbox rows and processed_messages rows older than the retention, in bounded batches.",
		args, e, nil)
	if err != nil {
		return err
	}
	st, closeStore, err := openMigrated(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	loop, err := retention.New(st, retention.Config{Retention: cfg.Retention})
	if err != nil {
		return err
	}
	r, err := loop.Once(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted %d outbox rows and %d processed_messages rows older than %s, dropped %d outbox partitions\n",
		r.Outbox, r.ProcessedMessages, cfg.Retention, r.OutboxPartitions)
	return nil
}

// subcommands runs the subcommand of a command group (outbox, dlq,
// notifications) that args[0] names, or answers with the group's usage.
func subcommands(ctx context.Context, args []string, e env, usage string, subs map[string]func(context.Context, []string, env) error) error {
	sub := ""
	if len(args) > 0 {
		sub, args = args[0], args[1:]
	}
	if run, ok := subs[sub]; ok {
		return run(ctx, args, e)
	}
	return groupUsage(e, sub, usage, slices.Sorted(maps.Keys(subs)))
}

// groupUsage answers a command group called without a known subcommand:
// its usage on stdout for a request for help, on stderr when none was
// named, and a one-line usage error naming the closest subcommand for a
// misspelt one.
func groupUsage(e env, sub, text string, names []string) error {
	switch sub {
	case "-h", "--help", "-help", "help":
		fmt.Fprintln(e.stdout, text)
		return nil
	case "":
		fmt.Fprintln(e.stderr, text)
		return errUsage
	}
	group, _, _ := strings.Cut(strings.TrimPrefix(text, "Usage: herald "), " ")
	hint := didYouMean(sub, names, group+" %s")
	if hint == "" {
		hint = "; the subcommands are " + strings.Join(names, ", ")
	}
	return usageError{fmt.Errorf("unknown subcommand %q of %s%s (run 'herald %s --help')", sub, group, hint, group)}
}
