package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	apiclient "github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
)

func cmdDLQ(ctx context.Context, args []string, e env) error {
	return subcommands(ctx, args, e, "Usage: herald dlq list [--since D] [--error TEXT] [--limit N] [--json]\n       herald dlq show ID [--attempts-limit N] [--attempts-cursor C] [--json]\n       herald dlq redrive (--id ID... | --all | --since D | --error TEXT | --limit N) [--dry-run]\n\nRun 'herald dlq SUBCOMMAND --help' for its flags.",
		map[string]func(context.Context, []string, env) error{"list": cmdDLQList, "show": cmdDLQShow, "redrive": cmdDLQRedrive})
}

// filterFlags registers the dead-letter filters shared by list and redrive.
type filterFlags struct {
	since time.Duration
	text  string
	limit int
}

func (f *filterFlags) register(fs *flag.FlagSet, defaultLimit int) {
	fs.DurationVar(&f.since, "since", 0, "only dead letters that failed within this duration (e.g. 24h)")
	fs.StringVar(&f.text, "error", "", "only dead letters whose last error contains this text (case-insensitive)")
	fs.IntVar(&f.limit, "limit", defaultLimit, "at most this many (0: no limit)")
}

func (f *filterFlags) filter() (notify.DeadLetterFilter, error) {
	var out notify.DeadLetterFilter
	if f.since < 0 || f.limit < 0 {
		return out, usageError{errors.New("--since and --limit must not be negative")}
	}
	if f.since > 0 {
		out.Since = time.Now().Add(-f.since)
	}
	out.ErrorContains = f.text
	out.Limit = f.limit
	return out, nil
}

func cmdDLQList(ctx context.Context, args []string, e env) error {
	var ff filterFlags
	var asJSON bool
	cfg, err := parseFlags("dlq list", "Lists dead letters (notifications in status failed), newest first.",
		args, e, func(fs *flag.FlagSet) {
			ff.register(fs, 100)
			fs.BoolVar(&asJSON, "json", false, `print them as GET /dead-letters answers: {"items": [{id, to, attempts, last_error, failed_at}, ...]}`)
		})
	if err != nil {
		return err
	}
	f, err := ff.filter()
	if err != nil {
		return err
	}
	var ns []notify.Notification
	if cfg.APIURL != "" {
		c, err := newAPIClient(cfg)
		if err != nil {
			return err
		}
		if ns, err = c.deadLetters(ctx, ff, f.Limit); err != nil {
			return err
		}
	} else {
		st, closeStore, err := openMigrated(ctx, cfg)
		if err != nil {
			return err
		}
		defer closeStore()
		if ns, err = deadletter.New(st, nil).List(ctx, f); err != nil {
			return err
		}
	}
	if asJSON {
		return printJSON(e.stdout, api.NewDeadLetterPage(ns, ""))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFAILED_AT\tATTEMPTS\tTO\tLAST_ERROR")
	for _, n := range ns {
		failed := ""
		if n.FailedAt != nil {
			failed = n.FailedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", n.ID, failed, n.Attempts, n.To, oneLine(n.LastError, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%d dead letter(s)\n", len(ns))
	return nil
}

func cmdDLQShow(ctx context.Context, args []string, e env) error {
	return showNotification(ctx, "dlq show", "Shows one dead letter with its body and its delivery attempts (each attempt's outcome and error), as herald notifications show does: herald dlq show ID.", args, e,
		func(n notify.Notification) {
			if n.Status != notify.StatusFailed {
				fmt.Fprintf(e.stderr, "note: notification %d is %s, not a dead letter\n", n.ID, n.Status)
			}
		})
}

// idList is a repeatable --id flag.
type idList []int64

func (l *idList) String() string { return fmt.Sprint([]int64(*l)) }

func (l *idList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		id, ok := notify.ParseID(strings.TrimSpace(part))
		if !ok {
			return fmt.Errorf("%q is not a notification id", part)
		}
		*l = append(*l, id)
	}
	return nil
}

func cmdDLQRedrive(ctx context.Context, args []string, e env) error {
	var ff filterFlags
	var ids idList
	var all, dryRun bool
	cfg, err := parseFlags("dlq redrive", "Moves dead letters back to pending with a fresh outbox event (one transaction each), so they are delivered again under the normal rules, and removes their messages from the broker's dead letters (RabbitMQ notifications.send.dlq, NATS notifications.dlq). A notification that was in fact sent is never sent again.",
		args, e, func(fs *flag.FlagSet) {
			ff.register(fs, 0)
			fs.Var(&ids, "id", "a notification id to redrive (repeatable, or comma-separated)")
			fs.BoolVar(&all, "all", false, "redrive every dead letter")
			fs.BoolVar(&dryRun, "dry-run", false, "only say what would be redriven")
		})
	if err != nil {
		return err
	}
	f, err := ff.filter()
	if err != nil {
		return err
	}
	f.IDs = ids
	if all && len(ids) > 0 {
		return usageError{fmt.Errorf("dlq redrive: --all and --id are exclusive: name ids, or all")}
	}
	if (notify.RedriveSelection{Filter: f, All: all}).Empty() {
		return usageError{errors.New("dlq redrive: nothing selected: name --id ID..., --all, or a filter (--since, --error, --limit)")}
	}
	sel := notify.RedriveSelection{Filter: f, All: all, DryRun: dryRun}
	var (
		res        notify.RedriveResult
		skips      []notify.Skip
		queueName  string
		queueInUse bool
	)
	if cfg.APIURL != "" {
		c, err := newAPIClient(cfg)
		if err != nil {
			return err
		}
		if res, skips, err = c.redrive(ctx, ff, sel); err != nil {
			return err
		}
		// The API's process removes the messages from its broker.
		queueName, queueInUse = "the broker's dead letters", res.RemovedFromQueue > 0
	} else {
		st, closeStore, err := openMigrated(ctx, cfg)
		if err != nil {
			return err
		}
		defer closeStore()
		// A redrive writes outbox rows: today's partition must exist.
		if err := ensurePartitions(ctx, st, slog.New(slog.NewTextHandler(e.stderr, nil))); err != nil {
			return err
		}
		tr, err := newTransport(cfg, slog.New(slog.NewTextHandler(e.stderr, nil)), "")
		if err != nil {
			return err
		}
		queue := tr.deadLetters
		if isTerminal(e.stderr) {
			sel.Progress = progressBar(e.stderr)
		}
		if res, err = deadletter.New(st, queue).Redrive(ctx, sel); err != nil {
			return err
		}
		if skips, err = notify.ExplainSkips(ctx, st.Get, ids, res); err != nil {
			return err
		}
		queueName, queueInUse = tr.deadLetterName, queue != nil
	}
	var skipped []string
	for _, s := range skips {
		skipped = append(skipped, fmt.Sprintf("%d (%s)", s.ID, s.Reason))
	}
	if dryRun {
		fmt.Fprintf(e.stdout, "would redrive %d dead letter(s): %v", len(res.Redriven), res.Redriven)
		if len(skipped) > 0 {
			fmt.Fprintf(e.stdout, "; would skip %d: %s", len(skipped), strings.Join(skipped, ", "))
		}
		fmt.Fprintln(e.stdout)
		return nil
	}
	fmt.Fprintf(e.stdout, "redrove %d of %d dead letter(s)", len(res.Redriven), res.Selected)
	if len(skipped) > 0 {
		fmt.Fprintf(e.stdout, "; skipped %d: %s", len(skipped), strings.Join(skipped, ", "))
	}
	if queueInUse {
		fmt.Fprintf(e.stdout, "; removed %d message(s) from %s", res.RemovedFromQueue, queueName)
	}
	fmt.Fprintln(e.stdout)
	return nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressBar draws "redrive [#####     ] 500/1000" on one terminal line,
// redrawn at most 20 times a second and at the end.
func progressBar(w io.Writer) func(done, total int) {
	var last time.Time
	return func(done, total int) {
		if done < total && time.Since(last) < 50*time.Millisecond {
			return
		}
		last = time.Now()
		const width = 30
		filled := width * done / max(total, 1)
		fmt.Fprintf(w, "\rredrive [%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(" ", width-filled), done, total)
		if done == total {
			fmt.Fprintln(w)
		}
	}
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

// deadLetters lists the dead letters through the API, page after page, up
// to limit (0: all of them), as the database path lists them.
func (a apiClient) deadLetters(ctx context.Context, ff filterFlags, limit int) ([]notify.Notification, error) {
	opts := apiclient.DeadLetterOptions{Since: ff.since, Error: ff.text, Limit: api.MaxDeadLetterLimit}
	if limit > 0 {
		opts.Limit = min(limit, api.MaxDeadLetterLimit)
	}
	var out []notify.Notification
	for d, err := range a.c.AllDeadLetters(ctx, opts) {
		if err != nil {
			return nil, fmt.Errorf("list dead letters: %w", err)
		}
		id, ok := notify.ParseID(d.ID)
		if !ok {
			return nil, fmt.Errorf("the API answered a notification id %q", d.ID)
		}
		out = append(out, notify.Notification{ID: id, To: d.To, Attempts: d.Attempts, LastError: d.LastError, FailedAt: d.FailedAt, Status: notify.StatusFailed})
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

// redrive redrives through the API, which says why it skipped what it
// skipped.
func (a apiClient) redrive(ctx context.Context, ff filterFlags, sel notify.RedriveSelection) (notify.RedriveResult, []notify.Skip, error) {
	req := apiclient.RedriveRequest{All: sel.All, Since: ff.since, Error: ff.text, Limit: ff.limit, DryRun: sel.DryRun}
	for _, id := range sel.Filter.IDs {
		req.IDs = append(req.IDs, notify.FormatID(id))
	}
	r, err := a.c.Redrive(ctx, req)
	if err != nil {
		return notify.RedriveResult{}, nil, fmt.Errorf("redrive: %w", err)
	}
	res := notify.RedriveResult{Selected: r.Selected, RemovedFromQueue: r.RemovedFromQueue, DryRun: r.DryRun, Redriven: []int64{}}
	for _, s := range r.Redriven {
		id, ok := notify.ParseID(s)
		if !ok {
			return res, nil, fmt.Errorf("the API answered a notification id %q", s)
		}
		res.Redriven = append(res.Redriven, id)
	}
	var skips []notify.Skip
	for _, s := range r.Skipped {
		id, ok := notify.ParseID(s.ID)
		if !ok {
			return res, nil, fmt.Errorf("the API answered a notification id %q", s.ID)
		}
		skips = append(skips, notify.Skip{ID: id, Reason: s.Reason})
	}
	return res, skips, nil
}
