package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/internal/testkit/faultproxy"
	"github.com/heraldhq/herald/internal/testkit/pgcluster"
	"github.com/heraldhq/herald/internal/testkit/proctest"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// Settings of the herald processes under test.
const (
	prefetch   = 10 // HERALD_PREFETCH: what one worker may hold unacked
	maxRetries = 5
	smtpFrom   = "herald@example.com"
	// appName marks the harness's own database connections, which the
	// backend-termination fault leaves alone.
	appName = "herald-chaos"
	// smtpTimeout is HERALD_SMTP_TIMEOUT, short so that a delivery's lease
	// (the send's bound plus 15s) is short enough for the SMTP-hang fault
	// to outlast it.
	smtpTimeout = 2 * time.Second
	// leaseExtra is how much longer than a send a delivery's claim lasts.
	leaseExtra = 15 * time.Second
	// reconcileAfter is HERALD_RECONCILE_AFTER: short, so that a purged
	// notification comes back within the run.
	reconcileAfter = 3 * time.Second
)

// harness is one transport's run.
type harness struct {
	o         options
	transport string
	// run is the run's row: which broker on which store.
	run chaosRun
	// brokerRow and storeRow are the rows of its broker and store.
	brokerRow *chaosBroker
	storeRow  *chaosStore
	nodes     int
	bin       string
	rng       *rand.Rand
	log       io.Writer
	runID     string

	dir      string
	dbName   string
	adminURL string
	directDB string // the scratch database, straight to PostgreSQL
	// vhost is the scratch vhost of a run on a shared broker
	// (--shared-rabbitmq), for the log.
	vhost string
	// pg is the database's topology (--pg): a scratch database on
	// --postgres, or a cluster of the run's own, which cluster is.
	pg      string
	cluster *pgCluster
	// pgProxies front the database (one per host herald is given).
	pgProxies []*faultproxy.Proxy
	// mqProxies front the broker (one per node), where herald reaches it
	// through proxies (chaosBroker.direct unset).
	mqProxies []*faultproxy.Proxy
	// br reaches the broker straight; nil for no broker (the table
	// transport).
	br brokerRun
	// st reaches the store herald runs on straight.
	st   storeView
	sink *smtptest.Server
	// hooks are the webhook endpoints a third of the load goes to.
	hooks *receiver
	// smtpFront is the SMTP server's address herald uses: a forwarder to
	// the sink that channel-outage black-holes.
	smtpFront *smtpFront
	db        *pgxpool.Pool
	env       map[string]string
	apiBase   string
	api       *proc
	relays    []*slot
	workers   []*slot
	start     time.Time
	cleanups  []func()
	mu        sync.Mutex
	faults    []faultRecord
	poisonIDs []int64
	// load is the client side, which the smtp-drop fault creates its
	// notifications through.
	load *load
	// throttleMails is how many MAIL commands the sink got during the
	// smtp-throttle fault.
	throttleMails int
	// dropIDs are the notifications of the smtp-drop fault, which must end
	// failed.
	dropIDs []int64
	// terms are the SIGTERMs sent and how long each exit took.
	terms []termRecord
	// holeIDs are the webhooks endpoint-blackhole created to its victim,
	// which must all be delivered once it answers again.
	holeIDs []int64
	// isolations are what the isolation faults measured.
	isolations []isolationRecord
}

// slot is one long-running herald role (a relay or a worker) whose process
// the faults kill and restart.
type slot struct {
	name    string
	args    string
	metrics string
	p       *proc
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.log, "[%s %7.2fs] %s\n", h.transport, h.offset().Seconds(), fmt.Sprintf(format, args...))
}

// offset is the time since the load began (0 before).
func (h *harness) offset() time.Duration {
	if h.start.IsZero() {
		return 0
	}
	return time.Since(h.start)
}

// setup creates the scratch database (and vhost), the proxies, the SMTP
// sink and the webhook receiver, then opens the run's store and starts its
// broker. Everything it creates is undone by teardown.
func (h *harness) setup(ctx context.Context) error {
	h.runID = suffix()
	dir, err := os.MkdirTemp("", "herald-chaos-"+h.transport+"-")
	if err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	h.dir = dir
	h.cleanups = append(h.cleanups, func() {
		if !h.o.keep {
			os.RemoveAll(dir)
		}
	})
	databaseURL, err := h.setupDatabase(ctx)
	if err != nil {
		return err
	}
	if err := h.setupReceivers(); err != nil {
		return err
	}
	h.env = h.baseEnv(databaseURL)
	if h.st, err = h.storeRow.open(ctx, h); err != nil {
		return err
	}
	if h.brokerRow.start != nil {
		if h.br, err = h.brokerRow.start(ctx, h); err != nil {
			return err
		}
	}
	h.logf("scratch database %s (%s), vhost %q, work dir %s", h.dbName, h.pg, h.vhost, h.dir)
	return nil
}

// setupDatabase creates the scratch database: beside --postgres's, or on
// a cluster of the run's own, which herald reaches through every host (or
// the bouncer in front of each), in order, each through a fault proxy. It
// returns herald's URL of the database.
func (h *harness) setupDatabase(ctx context.Context) (string, error) {
	h.adminURL = h.o.postgres
	var pgTargets []string
	var err error
	if h.pg != pgShared {
		if pgTargets, err = h.startCluster(ctx); err != nil {
			return "", err
		}
	}
	h.dbName = "herald_chaos_" + h.runID
	admin, err := pgx.Connect(ctx, h.adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL (--postgres): %w", err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+h.dbName)
	admin.Close(ctx)
	if err != nil {
		return "", fmt.Errorf("create scratch database: %w", err)
	}
	if h.cluster == nil {
		h.cleanups = append(h.cleanups, h.dropDatabase)
	}
	u, err := url.Parse(h.adminURL)
	if err != nil {
		return "", fmt.Errorf("parse --postgres: %w", err)
	}
	u.Path = "/" + h.dbName
	h.directDB = u.String()
	pcfg, err := pgxpool.ParseConfig(h.directDB)
	if err != nil {
		return "", fmt.Errorf("parse scratch database URL: %w", err)
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = appName
	pcfg.MaxConns = 4
	if h.db, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return "", fmt.Errorf("connect to the scratch database: %w", err)
	}
	h.cleanups = append(h.cleanups, h.db.Close)
	if h.cluster == nil {
		pgTargets = []string{hostPort(u, "5432")}
	}
	var proxied []string
	for _, target := range pgTargets {
		p, err := faultproxy.New(target)
		if err != nil {
			return "", err
		}
		h.cleanups = append(h.cleanups, func() { _ = p.Close() })
		h.pgProxies = append(h.pgProxies, p)
		proxied = append(proxied, p.Addr())
	}
	if h.cluster == nil {
		viaProxy := *u
		viaProxy.Host = proxied[0]
		return viaProxy.String(), nil
	}
	return pgcluster.MultiHostURL(h.dbName, proxied...), nil
}

// setupReceivers starts the SMTP sink, the forwarder in front of it and
// the webhook receiver.
func (h *harness) setupReceivers() error {
	var err error
	h.sink, err = smtptest.New()
	if err != nil {
		return fmt.Errorf("start the SMTP sink: %w", err)
	}
	h.cleanups = append(h.cleanups, h.sink.Close)
	// Only the smtp-drop fault's notifications go to such recipients.
	h.sink.DropAfterData(isDropRecipient)

	if h.smtpFront, err = startSMTPFront(h.sink.Addr()); err != nil {
		return err
	}
	h.cleanups = append(h.cleanups, h.smtpFront.close)

	if h.hooks, err = startReceiver(hookEndpoints); err != nil {
		return err
	}
	h.cleanups = append(h.cleanups, h.hooks.close)
	return nil
}

// baseEnv is the herald processes' environment, before the store and the
// broker add theirs.
func (h *harness) baseEnv(databaseURL string) map[string]string {
	return map[string]string{
		"HERALD_DATABASE_URL":   databaseURL,
		"HERALD_SMTP_URL":       "smtp://" + h.smtpFront.addr(),
		"HERALD_SMTP_FROM":      smtpFrom,
		"HERALD_RETRY_DELAY":    "1s",
		"HERALD_MAX_RETRIES":    fmt.Sprint(maxRetries),
		"HERALD_PREFETCH":       fmt.Sprint(prefetch),
		"HERALD_RELAY_INTERVAL": "200ms",
		"HERALD_DEBUG_FAULTS":   "1",
		"HERALD_SMTP_TIMEOUT":   smtpTimeout.String(),
		// The reconciler (in the api) brings back what a purge took.
		"HERALD_RECONCILE_AFTER": reconcileAfter.String(),
		// The webhook channel, to the receiver on loopback; its timeout
		// is the SMTP one, so that the lease stays what smtp-hang needs.
		"HERALD_WEBHOOK_SECRET":  h.hooks.secret,
		"HERALD_WEBHOOK_ALLOW":   "127.0.0.0/8",
		"HERALD_WEBHOOK_TIMEOUT": smtpTimeout.String(),
	}
}

// proxyBroker puts a fault proxy in front of each broker address and
// returns the proxies' addresses, in order.
func (h *harness) proxyBroker(targets []string) ([]string, error) {
	var addrs []string
	for _, t := range targets {
		p, err := faultproxy.New(t)
		if err != nil {
			return nil, err
		}
		h.cleanups = append(h.cleanups, func() { _ = p.Close() })
		h.mqProxies = append(h.mqProxies, p)
		addrs = append(addrs, p.Addr())
	}
	return addrs, nil
}

func hostPort(u *url.URL, defPort string) string {
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = defPort
	}
	return net.JoinHostPort(host, port)
}

func (h *harness) dropDatabase() {
	if h.o.keep {
		h.logf("kept database %s (--keep)", h.dbName)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, h.adminURL)
	if err != nil {
		h.logf("drop database %s: %v", h.dbName, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+h.dbName+" WITH (FORCE)"); err != nil {
		h.logf("drop database %s: %v", h.dbName, err)
	}
}

// procs returns the run's herald processes that are running: the api, the
// relays, the workers.
func (h *harness) procs() []*proc {
	var procs []*proc
	if h.api != nil {
		procs = append(procs, h.api)
	}
	for _, s := range append(append([]*slot(nil), h.relays...), h.workers...) {
		if s.p != nil {
			procs = append(procs, s.p)
		}
	}
	return procs
}

// teardown stops every process and undoes setup, in reverse order.
func (h *harness) teardown() {
	var wg sync.WaitGroup
	for _, p := range h.procs() {
		wg.Go(func() { p.stop(20 * time.Second) })
	}
	wg.Wait()
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		h.cleanups[i]()
	}
	if h.o.keep {
		h.logf("kept logs in %s (--keep)", h.dir)
	}
}

// envWith returns the processes' environment plus extra.
func (h *harness) envWith(extra map[string]string) map[string]string {
	env := make(map[string]string, len(h.env)+len(extra))
	for k, v := range h.env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startStack migrates, then starts the api, the relays (rabbitmq) and two
// workers, and waits until each is up.
func (h *harness) startStack(ctx context.Context) error {
	m, err := h.startProc("migrate", h.env, "migrate")
	if err != nil {
		return err
	}
	if m.WaitExit(ctx, 60*time.Second) != nil || m.Err() != nil {
		m.kill()
		return fmt.Errorf("herald migrate failed: %v\n%s", m.Err(), m.LogTail(2000))
	}
	addr, err := proctest.FreeAddr()
	if err != nil {
		return err
	}
	if h.api, err = h.startProc("api", h.envWith(map[string]string{"HERALD_HTTP_ADDR": addr}), "api"); err != nil {
		return err
	}
	h.apiBase = "http://" + addr
	if err := proctest.WaitHTTP(ctx, h.apiBase+"/readyz", 60*time.Second); err != nil {
		return fmt.Errorf("api not ready: %w\n%s", err, h.api.LogTail(2000))
	}
	if h.br != nil {
		for i := range 2 {
			h.relays = append(h.relays, &slot{name: fmt.Sprintf("relay%d", i+1), args: "relay"})
		}
	}
	for i := range 2 {
		h.workers = append(h.workers, &slot{name: fmt.Sprintf("worker%d", i+1), args: "worker"})
	}
	for _, s := range append(append([]*slot(nil), h.relays...), h.workers...) {
		if s.metrics, err = proctest.FreeAddr(); err != nil {
			return err
		}
		if err := h.startSlot(ctx, s, nil); err != nil {
			return err
		}
	}
	return nil
}

// startSlot (re)starts a slot's process with extra environment and waits
// for its /metrics listener, which answers once it runs.
func (h *harness) startSlot(ctx context.Context, s *slot, extra map[string]string) error {
	env := h.envWith(map[string]string{"HERALD_METRICS_ADDR": s.metrics})
	for k, v := range extra {
		env[k] = v
	}
	p, err := h.startProc(s.name, env, s.args)
	if err != nil {
		return err
	}
	s.p = p
	if err := proctest.WaitHTTP(ctx, "http://"+s.metrics+"/metrics", 60*time.Second); err != nil {
		if !p.Running() {
			return fmt.Errorf("herald %s exited at start: %v\n%s", s.name, p.Err(), p.LogTail(2000))
		}
		return fmt.Errorf("herald %s: %w", s.name, err)
	}
	return nil
}

// unexpectedExits lists the processes that died without the harness
// killing them.
func (h *harness) unexpectedExits() []string {
	var out []string
	check := func(p *proc) {
		if p != nil && !p.Running() && !p.expected {
			out = append(out, fmt.Sprintf("%s (%v), log tail:\n%s", p.Name(), p.Err(), p.LogTail(1500)))
		}
	}
	check(h.api)
	for _, s := range append(append([]*slot(nil), h.relays...), h.workers...) {
		check(s.p)
	}
	return out
}

// runTransport runs the whole scenario on one transport and prints its
// report; it fails when an invariant does.
func runTransport(ctx context.Context, o options, transport, bin string, rng *rand.Rand, stdout, stderr io.Writer) (err error) {
	run := runNamed(transport)
	h := &harness{o: o, transport: transport, run: run, brokerRow: brokerNamed(run.broker), storeRow: storeNamed(run.store),
		nodes: max(run.nodes, 1), bin: bin, rng: rng, log: stderr, pg: o.pg}
	if run.pg != "" {
		h.pg = run.pg
	}
	if h.storeRow.drainTimeout != nil {
		h.o.drainTimeout = h.storeRow.drainTimeout(o)
	}
	defer h.teardown()
	if err := h.setup(ctx); err != nil {
		return err
	}
	if err := h.startStack(ctx); err != nil {
		return err
	}
	res, err := h.scenario(ctx)
	if err != nil {
		return err
	}
	h.shutdown()
	h.checkTerms(res)
	res.print(stdout)
	if len(res.failures) > 0 {
		return errors.Join(res.failures...)
	}
	return nil
}
