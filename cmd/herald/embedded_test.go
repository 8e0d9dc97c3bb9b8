package main

import (
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// The embedded default: `herald serve` with nothing configured.
func TestServeZeroConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	require.NoError(t, err, "this test runs serve on its default address, 127.0.0.1:8080, which must be free")
	require.NoError(t, ln.Close())

	dir := t.TempDir()
	p := startHerald(t, dir, nil, "serve")
	api := client{base: "http://127.0.0.1:8080"}
	waitHTTP(t, api.base+"/healthz")
	require.FileExists(t, filepath.Join(dir, "herald.db"))
	// The start-up block says what serve uses, where the console is, the
	// channels it accepts and what enables the others.
	p.requireLog("SQLite file herald.db", "outbox table (no broker)", "mbox file herald.mbox", "HERALD_DATABASE_URL=postgres://",
		"  console    http://127.0.0.1:8080/ui\n",
		"  channels   email ", "HERALD_WEBHOOK_SECRET=... for webhook, HERALD_TELEGRAM_BOT_TOKEN=... for telegram")
	console, err := http.Get(api.base + "/ui")
	require.NoError(t, err)
	require.NoError(t, console.Body.Close())
	require.Equal(t, http.StatusOK, console.StatusCode, "the console's URL in the start-up block answers")

	start := time.Now()
	r := api.create(t, "ann@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	mbox := filepath.Join(dir, "herald.mbox")
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(mbox)
		return err == nil && strings.Contains(string(b), "Message-ID: <"+r.ID+"@localhost>")
	}, 10*time.Second, 5*time.Millisecond)
	t.Logf("time from 201 to the email in herald.mbox: %s", time.Since(start))
	// The email is written before the commit that marks it sent.
	require.Eventually(t, func() bool { return api.get(t, r.ID).Status == "sent" }, 10*time.Second, 5*time.Millisecond)
}

// kill -9 of serve during a burst of creates, then a restart: every
// notification that got a 201 is delivered; a repeat can only come from the
// one window a crash can hit (send done, record not committed), at most one
// per send in flight.
func TestServeKilledDuringBurstLosesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	// A short send timeout shortens the claim lease (timeout + 15s) that
	// the killed process leaves on the deliveries it was sending.
	// The prefetch bounds the sends a kill can catch in their window.
	const prefetch = 10
	env := map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_RELAY_INTERVAL": "100ms", "HERALD_SMTP_TIMEOUT": "2s",
		"HERALD_PREFETCH": fmt.Sprint(prefetch)}
	p := startHerald(t, dir, env, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	var mu sync.Mutex
	var accepted []string
	var stop atomic.Bool
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				r, err := tryCreate(api, fmt.Sprintf("c%d-%d@example.com", c, i))
				if err != nil || r.Status != 201 {
					continue // the server is down or going down: not accepted
				}
				mu.Lock()
				accepted = append(accepted, r.ID)
				mu.Unlock()
			}
		}()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) >= 150
	}, 60*time.Second, 5*time.Millisecond)
	p.Kill()
	stop.Store(true)
	wg.Wait()

	startHerald(t, dir, env, "serve")
	waitHTTP(t, api.base+"/healthz")
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "herald.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	require.Eventually(t, func() bool {
		var pending int
		require.NoError(t, db.QueryRow("SELECT count(*) FROM notifications WHERE status <> 'sent'").Scan(&pending))
		return pending == 0
	}, 60*time.Second, 20*time.Millisecond, "every stored notification is delivered after the restart")

	b, err := os.ReadFile(filepath.Join(dir, "herald.mbox"))
	require.NoError(t, err)
	seen := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^Message-ID: <(\d+)@localhost>`).FindAllStringSubmatch(string(b), -1) {
		seen[m[1]]++
	}
	dups := 0
	for _, id := range accepted {
		require.NotZero(t, seen[id], "notification %s got a 201 and was never delivered", id)
	}
	for id, n := range seen {
		if n > 1 {
			dups += n - 1
			t.Logf("notification %s delivered %d times (the send-to-commit window)", id, n)
		}
	}
	t.Logf("accepted=%d delivered=%d duplicates=%d", len(accepted), len(seen), dups)
	// No database is held across a send, so up to HERALD_PREFETCH sends
	// run at once (a finished one holds its slot until it is recorded),
	// and a kill can catch each in its window.
	require.LessOrEqual(t, dups, prefetch, "one kill can repeat at most the sends in flight, each in its window")
}

// tryCreate is create without test assertions, for clients that expect the
// server to vanish under them.
func tryCreate(api client, to string) (created, error) {
	body := fmt.Sprintf(`{"user_id":"u1","channel":"email","to":%q,"subject":"Hello","body":"b"}`, to)
	resp, err := httpClient.Post(api.base+"/notifications", "application/json", strings.NewReader(body))
	if err != nil {
		return created{}, err
	}
	defer resp.Body.Close()
	var n struct {
		ID string `json:"id"`
	}
	if err := jsonDecode(resp.Body, &n); err != nil {
		return created{}, err
	}
	return created{Status: resp.StatusCode, ID: n.ID}, nil
}

// HERALD_SMTP_URL=mbox:PATH writes mail to the file it names.
func TestServeMboxByName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "out"), 0o755))
	p := startHerald(t, dir, map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_SMTP_URL": "mbox:out/mail.mbox"}, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")
	p.requireLog("mbox file out/mail.mbox")
	r := api.create(t, "ann@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	require.Eventually(t, func() bool { return api.get(t, r.ID).Status == "sent" }, 10*time.Second, 5*time.Millisecond)
	b, err := os.ReadFile(filepath.Join(dir, "out", "mail.mbox"))
	require.NoError(t, err)
	require.Contains(t, string(b), "Message-ID: <"+r.ID+"@localhost>")
	require.NoFileExists(t, filepath.Join(dir, "herald.mbox"))
}
