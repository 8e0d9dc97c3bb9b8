package deployment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// DefaultEvery is how often a process reports itself.
const DefaultEvery = 10 * time.Second

// DefaultForget is how long the row of a process that stopped reporting
// is kept (shown stale) before a writer deletes it.
const DefaultForget = time.Hour

// LiveWithin is how recent a report must be for its process to count as
// running: three report periods, so that one slow or lost write does not
// make a process look gone.
func LiveWithin(every time.Duration) time.Duration { return 3 * every }

// Beater keeps the processes' reports. The stores implement it.
type Beater interface {
	// BeatProcess writes p's report, seen now, and deletes the reports of
	// processes not seen for longer than forget.
	BeatProcess(ctx context.Context, p notify.Process, forget time.Duration) error
	// LeaveProcess deletes id's report.
	LeaveProcess(ctx context.Context, id string) error
}

// ReporterConfig configures a Reporter.
type ReporterConfig struct {
	// Host, PID, Roles and Version describe the process. Roles is
	// required.
	Host    string
	PID     int
	Roles   []string
	Version string
	// Senders, when set, reports the state of the worker's senders, one
	// per channel (Since is read for a paused sender only). Default: nil
	// (no worker in the process).
	Senders func() []notify.SenderReport
	// Every is how often the report is written. Required (DefaultEvery).
	Every time.Duration
	// Check is how often the senders' states are read, so that a change
	// is written at once rather than at the next Every. Required (a second
	// is a fine choice; reading the states takes no I/O).
	Check time.Duration
	// Forget is how long a report not refreshed is kept. Required
	// (DefaultForget).
	Forget time.Duration
	// Logger receives failed writes. Default: discard.
	Logger *slog.Logger
}

func (c ReporterConfig) validate() error {
	var errs []error
	if len(c.Roles) == 0 {
		errs = append(errs, errors.New("roles are required"))
	}
	if c.Every <= 0 || c.Check <= 0 || c.Forget <= 0 {
		errs = append(errs, fmt.Errorf("every, check and forget must be positive, got %s, %s, %s", c.Every, c.Check, c.Forget))
	}
	if c.Forget < LiveWithin(c.Every) {
		errs = append(errs, fmt.Errorf("forget (%s) must be at least three reports (%s)", c.Forget, LiveWithin(c.Every)))
	}
	return errors.Join(errs...)
}

// Reporter writes its process's report to the store until its Run ends.
type Reporter struct {
	st  Beater
	cfg ReporterConfig
	log *slog.Logger
	id  string
	// started is when the reporter was made: the process's start.
	started time.Time
	// since keeps, per channel, when its state last changed as far as
	// the reporter saw.
	since map[string]time.Time
	last  []notify.SenderReport
}

// NewReporter returns a Reporter of a process, with a new random id.
func NewReporter(st Beater, cfg ReporterConfig) (*Reporter, error) {
	if st == nil {
		return nil, errors.New("new reporter: a store is required")
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new reporter: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Reporter{st: st, cfg: cfg, log: cfg.Logger, id: hex.EncodeToString(b), started: time.Now().UTC(),
		since: map[string]time.Time{}}, nil
}

// ID is the process's id in its reports.
func (r *Reporter) ID() string { return r.id }

// Run writes the report at once, then whenever a sender's state changes
// and at least every Every, until ctx ends; then it deletes the report.
// A failed write is logged (once per run of failures) and tried again at
// the next period: the report is never worth stopping the process for.
func (r *Reporter) Run(ctx context.Context) error {
	failing := false
	beat := func() {
		err := r.st.BeatProcess(ctx, r.report(), r.cfg.Forget)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			r.log.Warn("could not write this process's report for the console; trying again", "err", err)
		case err == nil && failing:
			failing = false
			r.log.Info("this process's report is written again")
		}
	}
	r.last = r.senders()
	beat()
	last := time.Now()
	t := time.NewTicker(r.cfg.Check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := r.st.LeaveProcess(lctx, r.id); err != nil {
				r.log.Warn("could not delete this process's report; it shows as stale until forgotten", "err", err)
			}
			return nil
		case <-t.C:
		}
		now := r.senders()
		if !sameStates(now, r.last) || time.Since(last) >= r.cfg.Every {
			r.last = now
			beat()
			last = time.Now()
		}
	}
}

// senders reads the senders' states, with each one's since: a paused
// sender's own, else when the reporter first saw the state (the process's
// start for a sender up since then).
func (r *Reporter) senders() []notify.SenderReport {
	if r.cfg.Senders == nil {
		return nil
	}
	ss := r.cfg.Senders()
	now := time.Now().UTC()
	for i := range ss {
		s := &ss[i]
		prev, seen := r.previous(s.Channel)
		switch {
		case !s.Up && !s.Since.IsZero():
			// The worker knows when sends were paused.
		case seen && prev.Up == s.Up:
			s.Since = prev.Since
		case !seen:
			s.Since = r.started
		default:
			s.Since = now
		}
		s.Since = s.Since.UTC()
	}
	slices.SortFunc(ss, func(a, b notify.SenderReport) int {
		switch {
		case a.Channel < b.Channel:
			return -1
		case a.Channel > b.Channel:
			return 1
		}
		return 0
	})
	return ss
}

func (r *Reporter) previous(channel string) (notify.SenderReport, bool) {
	for _, s := range r.last {
		if s.Channel == channel {
			return s, true
		}
	}
	return notify.SenderReport{}, false
}

// sameStates reports whether two readings show the same states (a changed
// Until alone, a probe's next time, is not worth a write).
func sameStates(a, b []notify.SenderReport) bool {
	return slices.EqualFunc(a, b, func(x, y notify.SenderReport) bool {
		return x.Channel == y.Channel && x.Up == y.Up && x.Class == y.Class && x.Reason == y.Reason &&
			x.PausedDestinations == y.PausedDestinations
	})
}

func (r *Reporter) report() notify.Process {
	return notify.Process{ID: r.id, Host: r.cfg.Host, PID: r.cfg.PID, Roles: r.cfg.Roles, Version: r.cfg.Version,
		StartedAt: r.started, Senders: r.last}
}
