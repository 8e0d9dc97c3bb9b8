package postgres

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/storetest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// The conformance suite through PgBouncer in transaction mode (issue 36),
// with PgBouncer's defaults: no ignore_startup_parameters, no prepared
// statement tracking (Debian 12's 1.18 has none). The store is told the
// direct URL, as docs/production.md says to: the listener and the
// partition drop use it.
//
// make test runs the subtests of pooledSubset: each of the store's
// statement families once (transactions with their SET LOCAL limits,
// batches, locks, claims, relay leases, the listener on the direct URL,
// advisory locks) and the races between them. The whole suite (over a
// hundred subtests of some 3 s each on two busy cores, mostly a database
// made and migrated for each) runs under make test-long (testenv.LongVar).
func TestConformancePgBouncer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	// A subset name the suite no longer has would drop its family
	// unnoticed: every one must have run (the check runs once the
	// parallel subtests are over).
	t.Cleanup(func() {
		for name := range pooledSubset {
			assert.True(t, seen[name], "pooledSubset names %s, which the conformance suite does not have", name)
		}
	})
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		name := t.Name()[strings.LastIndex(t.Name(), "/")+1:]
		mu.Lock()
		seen[name] = true
		mu.Unlock()
		if !testenv.Long() && !pooledSubset[name] {
			t.Skipf("%s through PgBouncer runs under make test-long (%s=1); make test runs a subtest of each statement family", name, testenv.LongVar)
		}
		return pooledHarness(t, Config{})
	})
}

// pooledSubset names the conformance subtests make test runs through
// PgBouncer.
var pooledSubset = map[string]bool{}

func init() {
	for _, name := range strings.Fields(`Ping CreateGet IdempotentReplay IdempotencyRacers InjectedFault MigrateTwice
		BatchCreate BatchKeyRace BatchInjectedFault RelayBatchEvents RelayBatchConcurrent RelayBatchPublishError RelayBatchTypes
		Subscribe DeliverOnce DeliverConcurrent ClaimTwiceConcurrently ClaimLease ClaimDueOrder ClaimAndRecordGroups
		LockOrderNoDeadlock RecordRetryReleasesClaim DeferralFolds PendingStats ProcessReports DestinationFailing
		DestinationDisableRace StaleCopyConcurrent StatusEventOnSent NoStatusEvents Reschedule FinishMany OutboxStats
		DeadLettersPaging RedriveFailed Prune Reconcile List ListConcurrentInserts Attempts Traceparent
		ScheduledNotBeforeSendAt CancelRacesClaim ExpiredAtClaim PriorityClaimOrder PriorityRelayOrder BacklogLeavesScheduledOut`) {
		pooledSubset[name] = true
	}
}

// pooledHarness is harness through PgBouncer, with the direct URL.
func pooledHarness(t *testing.T, cfg Config) storetest.Harness {
	t.Helper()
	direct := inZone(t, migratedURL(t), farZone)
	cfg.DirectURL = direct
	s := openConfig(t, testenv.PgBouncerURL(t, direct), cfg)
	h := harnessOf(s)
	h.NoStatusEvents = func(t *testing.T) storetest.Harness { return pooledHarness(t, Config{NoStatusEvents: true}) }
	return h
}

// What the fix is for: PgBouncer refuses a connection whose startup packet
// carries the session limits the store sets on the direct path, and the
// store, which sends none through it, works.
func TestPgBouncerRefusesSessionLimits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	direct := migratedURL(t)
	pooled := testenv.PgBouncerURL(t, direct)

	cfg, err := pgx.ParseConfig(pooled)
	require.NoError(t, err)
	for name, value := range sessionLimits {
		cfg.RuntimeParams[name] = value
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		_ = conn.Close(ctx)
	}
	require.ErrorContains(t, err, "unsupported startup parameter")

	s := open(t, pooled)
	require.NoError(t, s.Ping(ctx))
	got, err := s.Pooled(ctx)
	require.NoError(t, err)
	require.True(t, got, "a pooler detected behind %s", testenv.PgBouncerVar)
	d := open(t, direct)
	got, err = d.Pooled(ctx)
	require.NoError(t, err)
	require.False(t, got, "no pooler on the direct URL")
}

// Behind the pooler every transaction and batch of the store runs with
// the limits that the direct path's sessions start with, and none of them
// stays on the server sessions that PgBouncer hands to its other clients.
func TestPgBouncerLimitsPerTransaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// An empty database: the migrations, too, run through PgBouncer.
	direct := testenv.PostgresURL(t)
	s := openConfig(t, testenv.PgBouncerURL(t, direct), Config{MaxConns: 2})
	const show = `SELECT current_setting('lock_timeout'), current_setting('statement_timeout'),
	current_setting('idle_in_transaction_session_timeout'), current_setting('plan_cache_mode')`
	type limits struct{ lock, statement, idle, plans string }
	read := func(row pgx.Row) limits {
		var l limits
		require.NoError(t, row.Scan(&l.lock, &l.statement, &l.idle, &l.plans))
		return l
	}

	tx, err := s.begin(ctx)
	require.NoError(t, err)
	got := read(tx.QueryRow(ctx, show))
	rollback(tx)
	require.Equal(t, limits{"10s", "30s", "1min", "auto"}, got, "in a transaction")

	b := &pgx.Batch{}
	b.Queue(show)
	br := s.sendBatch(ctx, b)
	got = read(br.QueryRow())
	require.NoError(t, br.Close())
	require.Equal(t, limits{"10s", "30s", "0", "auto"}, got, "in a batch")

	// Outside them: the server's defaults, on every server session.
	for range 4 {
		got = read(s.pool.QueryRow(ctx, show))
		require.Equal(t, limits{"0", "0", "0", "auto"}, got, "outside a transaction")
	}
}

// Wake-ups behind the pooler: with the direct URL, another process's
// create wakes a subscriber through LISTEN; without one, no listener
// connects (polling covers the others' creates) and the process's own
// creates still wake it.
func TestPgBouncerWakeUps(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	direct := migratedURL(t)
	pooled := testenv.PgBouncerURL(t, direct)
	creator := open(t, pooled)
	listener := openConfig(t, pooled, Config{DirectURL: direct})
	alone := open(t, pooled)

	sub := listener.Subscribe(ctx)
	subAlone := alone.Subscribe(ctx)
	// The listener's first wake-up says it listens.
	select {
	case <-sub:
	case <-ctx.Done():
		t.Fatal("the listener on the direct URL never connected")
	}
	_, err := creator.Create(ctx, groupRequest(1))
	require.NoError(t, err)
	select {
	case <-sub:
	case <-ctx.Done():
		t.Fatal("another process's create did not wake the subscriber")
	}

	// alone has no listener: its only listener-named connection would be
	// the one on the direct URL.
	require.Equal(t, 1, count(t, creatorDirect(t, direct), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, listenerApplicationName))
	select {
	case <-subAlone:
		t.Fatal("a wake-up with no listener and no create of its own")
	default:
	}
	_, err = alone.Create(ctx, groupRequest(2))
	require.NoError(t, err)
	select {
	case <-subAlone:
	case <-ctx.Done():
		t.Fatal("the process's own create did not wake its subscriber")
	}
}

// creatorDirect is a store on the direct URL, to look at the server.
func creatorDirect(t *testing.T, url string) *Store { return open(t, url) }

// Behind the pooler with no direct URL, a retention pass keeps the old
// partitions and says why, instead of taking a session lock that would
// stay on a server session; with the direct URL it drops them.
func TestPgBouncerPartitionDrop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	direct := migratedURL(t)
	pooled := testenv.PgBouncerURL(t, direct)
	s := open(t, pooled)
	d := openConfig(t, pooled, Config{DirectURL: direct})
	// Four empty partitions of days gone, all due (outbox_legacy, which
	// covers them after the migration, left out of the way).
	today := time.Now().UTC().Truncate(24 * time.Hour)
	_, err := s.pool.Exec(ctx, `ALTER TABLE outbox DETACH PARTITION outbox_legacy`)
	require.NoError(t, err)
	made, err := s.ensurePartitions(ctx, today.AddDate(0, 0, -10), 3)
	require.NoError(t, err)
	require.Equal(t, 4, made)
	cut := today.AddDate(0, 0, -1)

	n, err := s.dropOldPartitions(ctx, cut)
	require.ErrorIs(t, err, ErrNoDirectURL)
	require.Zero(t, n)

	n, err = d.dropOldPartitions(ctx, cut)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
}

// Behind the pooler the store prepares nothing per connection
// (cache_describe), unless the URL chose a mode; on the direct path it
// prepares each statement once per connection, as before.
func TestPgBouncerExecMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	direct := migratedURL(t)
	pooled := testenv.PgBouncerURL(t, direct)
	for _, tc := range []struct {
		url  string
		want pgx.QueryExecMode
	}{
		{direct, pgx.QueryExecModeCacheStatement},
		{pooled, pgx.QueryExecModeCacheDescribe},
		{pooled + "&default_query_exec_mode=exec", pgx.QueryExecModeExec},
	} {
		s := open(t, tc.url)
		conn, err := s.pool.Acquire(ctx)
		require.NoError(t, err)
		got := conn.Conn().Config().DefaultQueryExecMode
		conn.Release()
		require.Equal(t, tc.want, got, "%s", tc.url)
	}
}
