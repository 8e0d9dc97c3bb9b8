package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/testkit/pgcluster"
)

// The database topologies a run can have (--pg).
const (
	// pgShared is a scratch database on --postgres: no failover.
	pgShared = "shared"
	// pgSync is a primary and a synchronous standby of the run's own;
	// herald is given both hosts (target_session_attrs=read-write) and
	// the schedule gains pg-failover.
	pgSync = "sync"
	// pgAsync is the same with an asynchronous standby: what it loses at
	// a failover is what the checks count as lost.
	pgAsync = "async"
	// pgBouncer is pgSync with a PgBouncer (transaction pooling) in front
	// of each server: herald is given the two bouncers.
	pgBouncer = "pgbouncer"
)

var pgTopologies = []string{pgShared, pgSync, pgAsync, pgBouncer}

// pgCluster is a run's own PostgreSQL: a primary and its standby, until
// pg-failover promotes the standby.
type pgCluster struct {
	primary, standby *pgcluster.Cluster
	sync             bool
	// bouncers front the servers, in the order of hosts (pgbouncer only).
	bouncers []*pgcluster.Bouncer
	// hosts are the servers' addresses, primary first: the order of the
	// multi-host URL.
	hosts []string
	// failover is what the pg-failover fault measured (nil before).
	failover *failoverFigures
}

// failoverFigures are one failover's figures, from the kill of the
// primary.
type failoverFigures struct {
	// promoted is when the standby ended its recovery; released when it
	// stopped waiting for a synchronous standby (pgSync: a failover
	// manager's two steps).
	promoted, released time.Duration
	// firstCreate is when the first create sent after the kill was
	// answered 201: the first one the new primary took.
	firstCreate time.Duration
	// refused counts the answers other than 201 (errors included) from
	// the kill to that first 201, and refusedCreates the creates they
	// were to; each was retried with its Idempotency-Key.
	refused, refusedCreates int
}

// startCluster starts the run's primary and standby (and bouncers), and
// returns the addresses herald is to be given, in order: the servers, or
// the bouncers in front of them.
func (h *harness) startCluster(ctx context.Context) ([]string, error) {
	began := time.Now()
	c := &pgCluster{sync: h.pg != pgAsync}
	h.cluster = c
	var err error
	if c.primary, err = pgcluster.StartPrimary(ctx, pgcluster.Options{Name: "chaos_" + h.runID, MaxConnections: 300}); err != nil {
		return nil, err
	}
	primary := c.primary
	h.cleanups = append(h.cleanups, primary.Close)
	if c.standby, err = pgcluster.StartStandby(ctx, primary, c.sync); err != nil {
		return nil, err
	}
	h.cleanups = append(h.cleanups, c.standby.Close)
	c.hosts = []string{primary.Addr(), c.standby.Addr()}
	h.adminURL = pgcluster.MultiHostURL("postgres", c.hosts...)
	kind := "synchronous"
	if !c.sync {
		kind = "asynchronous"
	}
	targets := c.hosts
	if h.pg == pgBouncer {
		targets = nil
		for _, host := range c.hosts {
			b, err := pgcluster.StartBouncer(ctx, host)
			if err != nil {
				return nil, err
			}
			h.cleanups = append(h.cleanups, b.Close)
			c.bouncers = append(c.bouncers, b)
			targets = append(targets, b.Addr())
		}
	}
	h.logf("PostgreSQL of its own: primary %s, %s standby %s, up in %.1fs", primary.Addr(), kind, c.standby.Addr(), time.Since(began).Seconds())
	return targets, nil
}

// pgFailover kills the primary (every process of it, -9), promotes the
// standby and, with a synchronous standby, tells it to stop waiting for
// one, as a failover manager does; then it waits for the first create
// sent after the kill to be answered 201. Every transaction in flight dies
// with the primary: a worker's, cut after its send, repeats it.
func (h *harness) pgFailover(ctx context.Context) (string, int, error) {
	c := h.cluster
	window := len(h.workers) * prefetch
	if c.standby == nil {
		return "", 0, errors.New("no standby left to promote")
	}
	killed := time.Now()
	if err := c.primary.Kill9(); err != nil {
		return "", window, err
	}
	f := &failoverFigures{}
	if err := c.standby.Promote(ctx); err != nil {
		return "", window, err
	}
	f.promoted = time.Since(killed)
	if c.sync {
		if err := c.standby.ReleaseSync(ctx); err != nil {
			return "", window, err
		}
	}
	f.released = time.Since(killed)
	c.primary, c.standby = c.standby, nil
	first, err := h.load.firstAcceptedAfter(ctx, killed, 2*time.Minute)
	if err != nil {
		return "", window, fmt.Errorf("no create sent after the kill was accepted: %w", err)
	}
	f.firstCreate = first.Sub(killed)
	f.refused, f.refusedCreates = h.load.refusedBetween(killed, first)
	c.failover = f
	detail := fmt.Sprintf("primary killed -9, standby promoted at +%.2fs", f.promoted.Seconds())
	if c.sync {
		detail += fmt.Sprintf(", released from its synchronous standby at +%.2fs", f.released.Seconds())
	}
	return detail + fmt.Sprintf("; first 201 at +%.2fs; before it %d answers other than 201, to %d creates (retried with their keys)",
		f.firstCreate.Seconds(), f.refused, f.refusedCreates), window, nil
}
