package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// This file is what a long-running process says and checks as it starts:
// the start-up record (where its database and broker are, the settings it
// uses), the broker names it declares before it needs them, and the
// reachability of both, logged at start and at every change.

// where names the hosts (and path) a connection string points at, without
// credentials: what a log may say of where a process connects.
func where(raw string) string {
	if !strings.Contains(raw, "://") {
		return redact(raw) // sqlite:PATH, mbox:PATH
	}
	var out []string
	for _, u := range splitURLs(redact(raw)) {
		scheme, rest, _ := strings.Cut(u, "://")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			rest = rest[at+1:]
		}
		out = append(out, scheme+"://"+rest)
	}
	return strings.Join(out, ",")
}

// settingText is the value of s in c as its flag would spell it.
func settingText(c *Config, s setting) string {
	switch p := s.field(c).(type) {
	case *string:
		return *p
	case *int:
		return strconv.Itoa(*p)
	case *time.Duration:
		return p.String()
	case *[]time.Duration:
		var parts []string
		for _, d := range *p {
			parts = append(parts, d.String())
		}
		return strings.Join(parts, ",")
	case *bool:
		return strconv.FormatBool(*p)
	}
	return ""
}

// startupRecord is the attributes of a process's "starting" log: its roles,
// where its database and broker are, and every other setting the command
// takes (and only those: a relay names no sender), secrets masked.
func startupRecord(cmd string, cfg Config, roles []role, transport string) []any {
	attrs := []any{"roles", fmt.Sprint(roles), "database", where(cfg.DatabaseURL), "transport", transport}
	if cfg.BrokerURL != "" {
		attrs = append(attrs, "broker", where(cfg.BrokerURL))
	}
	if hasRole(roles, roleWorker) {
		attrs = append(attrs, "sender", senderKind(cfg))
	}
	for _, s := range settings {
		if !s.takes(cmd) || s.env == "HERALD_DATABASE_URL" || s.env == "HERALD_BROKER_URL" {
			continue
		}
		attrs = append(attrs, s.env, s.shown(settingText(&cfg, s)))
	}
	return attrs
}

// dependency is something a process needs and cannot make: its database
// or its broker.
type dependency struct {
	// name is "database" or "broker", as the logs say it.
	name string
	// where is its host (no secrets).
	where string
	// check reports whether it can be reached.
	check func(ctx context.Context) error
	// declare, when set, is run instead of check until it succeeds once:
	// the broker names the process uses, declared (or checked) as soon as
	// the broker answers. An error marked notify.Permanent (a queue
	// declared with other arguments) stops the process.
	declare func(ctx context.Context) error
}

// reachability follows the state of one dependency and says when it
// changed. It is a pure state machine; watch does the I/O.
type reachability struct {
	known, up bool
}

// observe records the outcome of one check and returns the log record it
// calls for: a level and a message, or ok false when nothing changed.
func (r *reachability) observe(name string, err error) (level slog.Level, msg string, ok bool) {
	first, was := !r.known, r.up
	r.known, r.up = true, err == nil
	switch {
	case err != nil && (first || was):
		return slog.LevelWarn, name + " unreachable", true
	case err == nil && first:
		return slog.LevelInfo, name + " reachable", true
	case err == nil && !was:
		return slog.LevelInfo, name + " reachable again", true
	}
	return 0, "", false
}

// watch checks d at once and then every interval until ctx ends, logging
// every change of state (the first check included). It returns an error
// only when d's declaration fails for good.
func (d dependency) watch(ctx context.Context, log *slog.Logger, interval time.Duration) error {
	timeout := min(max(interval, 2*time.Second), 10*time.Second)
	var state reachability
	declared := d.declare == nil
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		var err error
		if declared {
			err = d.check(cctx)
		} else {
			err = d.declare(cctx)
		}
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if !declared && notify.IsPermanent(err) {
			log.Error(d.name+" refuses the names this process declares; fix the configuration and restart",
				d.name, d.where, "err", err)
			return fmt.Errorf("%s %s: %w", d.name, d.where, err)
		}
		if err == nil && !declared {
			declared = true
			log.Info(d.name+" names declared", d.name, d.where)
		}
		if level, msg, ok := state.observe(d.name, err); ok {
			attrs := []any{d.name, d.where}
			if err != nil {
				attrs = append(attrs, "err", err)
			}
			log.Log(ctx, level, msg, attrs...)
		}
		timer.Reset(interval)
	}
}

// dependencies lists what a process of roles needs: the database always,
// the broker when there is one. A relay or a worker declares the broker
// names it uses (a relay only the route of its events, a worker the retry
// queues of its schedule too); the API uses the broker only to clear
// redriven dead letters (by name, passively) and checks that it answers.
func (a *app) dependencies(roles []role) []dependency {
	deps := []dependency{{name: "database", where: where(a.cfg.DatabaseURL), check: a.st.Ping}}
	if a.tr.probe == nil {
		return deps
	}
	broker := dependency{name: "broker", where: where(a.cfg.BrokerURL), check: a.tr.probe.Ping}
	if hasRole(roles, roleRelay) || hasRole(roles, roleWorker) {
		worker := hasRole(roles, roleWorker)
		broker.declare = func(ctx context.Context) error { return a.tr.declare(ctx, worker) }
	}
	return append(deps, broker)
}

// watchParts are the parts that watch the dependencies of a process.
func (a *app) watchParts(roles []role) []func(context.Context) error {
	var out []func(context.Context) error
	for _, d := range a.dependencies(roles) {
		out = append(out, func(ctx context.Context) error { return d.watch(ctx, a.log, a.cfg.ProbeInterval) })
	}
	return out
}
