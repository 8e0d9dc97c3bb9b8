package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// Every time herald emits is RFC 3339 in UTC with Z, whatever the server's
// or the database session's zone (issue 33): herald serve and the CLI run
// with TZ=Asia/Kolkata on a PostgreSQL database whose timezone is
// Asia/Kolkata too. The API's times, the status webhook's at (the very
// string the API shows for sent_at) and the CLI's JSON all end in Z.
func TestTimesInUTCOutsideUTC(t *testing.T) {
	t.Parallel()
	const zone = "Asia/Kolkata"
	db := testenv.PostgresURL(t)
	u, err := url.Parse(db)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.Require(t, testenv.PostgresVar))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()+" SET timezone = '"+zone+"'")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	key := []byte("0123456789abcdef0123456789abcdef")
	var mu sync.Mutex
	var events [][]byte
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		events = append(events, b)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)

	env := map[string]string{
		"TZ":                        zone,
		"HERALD_DATABASE_URL":       db,
		"HERALD_SMTP_URL":           smtptest.Start(t).URL(),
		"HERALD_SMTP_FROM":          "herald@example.com",
		"HERALD_RELAY_INTERVAL":     "100ms",
		"HERALD_WEBHOOK_SECRET":     "whsec_" + base64.StdEncoding.EncodeToString(key),
		"HERALD_STATUS_WEBHOOK_URL": rcv.URL + "/status",
	}
	dir := t.TempDir()
	m := startHerald(t, dir, env, "migrate")
	m.waitExit(60 * time.Second)
	require.NoError(t, m.Err(), "herald migrate")
	addr := freeAddr(t)
	serveEnv := map[string]string{"HERALD_HTTP_ADDR": addr}
	for k, v := range env {
		serveEnv[k] = v
	}
	startHerald(t, dir, serveEnv, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	c := api.create(t, "someone@example.com", nil)
	require.Equal(t, http.StatusCreated, c.Status, c.Body)
	requireUTC(t, "the create's answer", []byte(c.Body))
	var shown struct {
		SentAt string `json:"sent_at"`
	}
	var body []byte
	require.Eventually(t, func() bool {
		body = getRaw(t, api.base+"/notifications/"+c.ID)
		require.NoError(t, json.Unmarshal(body, &shown))
		return shown.SentAt != ""
	}, 30*time.Second, 20*time.Millisecond, "never sent")
	requireUTC(t, "GET /notifications/{id}", body)
	requireUTC(t, "GET /notifications", getRaw(t, api.base+"/notifications"))
	requireUTC(t, "GET /notifications/{id}/attempts", getRaw(t, api.base+"/notifications/"+c.ID+"/attempts"))

	var ev struct {
		Data struct {
			At string `json:"at"`
		} `json:"data"`
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) > 0
	}, 30*time.Second, 20*time.Millisecond, "no status event")
	mu.Lock()
	require.NoError(t, json.Unmarshal(events[0], &ev))
	requireUTC(t, "the status webhook's body", events[0])
	mu.Unlock()
	require.Equal(t, shown.SentAt, ev.Data.At, "the event's at is the API's sent_at")

	for _, args := range [][]string{
		{"notifications", "show", "--json", c.ID},
		{"notifications", "list", "--json"},
	} {
		cmd := exec.CommandContext(t.Context(), heraldBin(t), args...)
		cmd.Env = []string{"TZ=" + zone, "HERALD_DATABASE_URL=" + db}
		out, err := cmd.Output()
		require.NoError(t, err, "herald %v", args)
		requireUTC(t, "herald "+strings.Join(args, " "), out)
		require.Contains(t, string(out), shown.SentAt, "herald %v shows sent_at as the API does", args)
	}
}

// getRaw GETs url and returns the body of its 200.
func getRaw(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, b)
	return b
}

// requireUTC fails unless every string in the JSON document doc that is a
// time (RFC 3339) is in UTC with Z; it also fails when doc holds none.
func requireUTC(t *testing.T, what string, doc []byte) {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(doc, &v), "%s: %s", what, doc)
	n := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		case string:
			if _, err := time.Parse(time.RFC3339Nano, x); err == nil {
				n++
				require.True(t, strings.HasSuffix(x, "Z"), "%s: %s is %q, not UTC with Z", what, path, x)
			}
		}
	}
	walk("", v)
	require.NotZero(t, n, "%s holds no time: %s", what, doc)
}
