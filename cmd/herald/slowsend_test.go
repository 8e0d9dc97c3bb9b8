package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// slowSMTP is an SMTP server that takes hold before it answers DATA: a
// provider that is slow, or hung, while herald waits for it.
type slowSMTP struct {
	addr    string
	started atomic.Int32 // DATA commands received
	done    atomic.Int32 // DATA commands answered
}

func startSlowSMTP(t *testing.T, hold time.Duration) *slowSMTP {
	t.Helper()
	s := &slowSMTP{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &slowSession{s: s, hold: hold}, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout = time.Minute
	srv.WriteTimeout = time.Minute
	srv.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *slowSMTP) url() string { return "smtp://" + s.addr }

type slowSession struct {
	s    *slowSMTP
	hold time.Duration
}

func (se *slowSession) Mail(string, *smtp.MailOptions) error { return nil }
func (se *slowSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (se *slowSession) Reset()                               {}
func (se *slowSession) Logout() error                        { return nil }

// Data holds the answer: the hold is the behaviour under test (a slow
// provider), not a synchronisation.
func (se *slowSession) Data(r io.Reader) error {
	se.s.started.Add(1)
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	time.Sleep(se.hold)
	se.s.done.Add(1)
	return nil
}

// createsWhileSendsHang starts sends that hang at the SMTP server, then
// creates n notifications from clients clients while they hang, and
// returns the latencies of the creates. Every create must answer 201.
func createsWhileSendsHang(t *testing.T, api client, srv *slowSMTP, n, clients int) []time.Duration {
	t.Helper()
	// A first notification, whose send hangs in DATA.
	r := api.create(t, "first@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	require.Eventually(t, func() bool { return srv.started.Load() >= 1 }, 30*time.Second, 5*time.Millisecond,
		"no send reached the SMTP server")
	require.Zero(t, srv.done.Load(), "the hold is long enough to overlap the creates")

	var (
		mu   sync.Mutex
		lat  []time.Duration
		fail []string
	)
	var wg sync.WaitGroup
	per := n / clients
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				start := time.Now()
				r, err := tryCreate(api, fmt.Sprintf("c%d-%d@example.com", c, i))
				d := time.Since(start)
				mu.Lock()
				switch {
				case err != nil:
					fail = append(fail, err.Error())
				case r.Status != 201:
					fail = append(fail, fmt.Sprintf("%d %s", r.Status, r.Body))
				default:
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, fail)
	require.Zero(t, srv.done.Load(), "the creates ran while the first send hung")
	slices.Sort(lat)
	return lat
}

func p99(lat []time.Duration) time.Duration {
	return lat[(len(lat)*99)/100-1]
}

// Guarantee 7: a send that hangs at the mail server holds no database
// connection, SQLite write lock or row lock, so creates finish fast
// meanwhile. Each subtest runs the stack with an SMTP server that answers
// DATA only after 5 s.
func TestCreatesFastWhileSendHangs(t *testing.T) {
	t.Parallel()
	const (
		hold    = 5 * time.Second
		creates = 64
		clients = 8
		limit   = time.Second
	)
	t.Run("sqlite table", func(t *testing.T) {
		t.Parallel()
		srv := startSlowSMTP(t, hold)
		addr := freeAddr(t)
		startHerald(t, t.TempDir(), map[string]string{
			"HERALD_HTTP_ADDR": addr,
			"HERALD_SMTP_URL":  srv.url(),
			"HERALD_SMTP_FROM": "herald@example.com",
		}, "serve")
		api := client{base: "http://" + addr}
		waitHTTP(t, api.base+"/healthz")
		lat := createsWhileSendsHang(t, api, srv, creates, clients)
		t.Logf("creates while a send hangs (SQLite, table): p50 %s, p99 %s, max %s", lat[len(lat)/2], p99(lat), lat[len(lat)-1])
		require.Less(t, p99(lat), limit)
	})
	t.Run("sqlite rabbitmq", func(t *testing.T) {
		t.Parallel()
		srv := startSlowSMTP(t, hold)
		addr := freeAddr(t)
		startHerald(t, t.TempDir(), map[string]string{
			"HERALD_HTTP_ADDR":      addr,
			"HERALD_BROKER_URL":     testenv.Vhost(t),
			"HERALD_SMTP_URL":       srv.url(),
			"HERALD_SMTP_FROM":      "herald@example.com",
			"HERALD_RELAY_INTERVAL": "100ms",
		}, "serve")
		api := client{base: "http://" + addr}
		waitHTTP(t, api.base+"/healthz")
		lat := createsWhileSendsHang(t, api, srv, creates, clients)
		t.Logf("creates while a send hangs (SQLite, RabbitMQ): p50 %s, p99 %s, max %s", lat[len(lat)/2], p99(lat), lat[len(lat)-1])
		require.Less(t, p99(lat), limit)
	})
	t.Run("postgres rabbitmq", func(t *testing.T) {
		t.Parallel()
		srv := startSlowSMTP(t, hold)
		s := newStack(t, map[string]string{"HERALD_SMTP_URL": srv.url()})
		s.startAPI(nil)
		s.start("relay")
		s.start("worker")
		lat := createsWhileSendsHang(t, s.api, srv, creates, clients)
		t.Logf("creates while a send hangs (PostgreSQL, RabbitMQ): p50 %s, p99 %s, max %s", lat[len(lat)/2], p99(lat), lat[len(lat)-1])
		require.Less(t, p99(lat), limit)
		// The hanging sends hold no transaction open: no herald session
		// has sat idle in a transaction for a second (the relay's own
		// transactions last milliseconds).
		require.Zero(t, count(t, s.db, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND state = 'idle in transaction' AND application_name = 'herald'
  AND state_change < now() - interval '1 second'`))
	})
}
