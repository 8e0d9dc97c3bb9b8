package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// timed is a notification as the timing tests read it.
type timed struct {
	ID     string  `json:"id"`
	Status string  `json:"status"`
	SendAt *string `json:"send_at"`
	SentAt *string `json:"sent_at"`
}

// post sends a JSON request and decodes the notification it answers.
func (c client) post(t *testing.T, path, body string) (int, timed) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(http.MethodPost, c.base+path, r)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var n timed
	_ = json.Unmarshal(b, &n)
	return resp.StatusCode, n
}

func (c client) timed(t *testing.T, id string) timed {
	t.Helper()
	resp, err := http.Get(c.base + "/notifications/" + id)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var n timed
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&n))
	return n
}

func timedBody(to string, extra string) string {
	return `{"user_id":"u1","channel":"email","to":"` + to + `","subject":"Hello","body":"Hi"` + extra + `}`
}

// The embedded default (SQLite, the outbox table) with a real SMTP server:
// a notification scheduled 2 s ahead is scheduled until then and is not
// sent before it; serve stops before it is due and starts again after:
// it is sent once, after its send_at.
func TestScheduledSentOnceAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sink := smtptest.Start(t)
	addr := freeAddr(t)
	env := map[string]string{
		"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(dir, "herald.db"),
		"HERALD_HTTP_ADDR":    addr, "HERALD_SMTP_URL": sink.URL(), "HERALD_SMTP_FROM": "herald@example.com",
	}
	p := startHerald(t, dir, env, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	const delay = 2 * time.Second
	start := time.Now()
	sendAt := start.Add(delay).UTC()
	status, n := api.post(t, "/notifications", timedBody("ann@example.com", `,"send_at":"`+sendAt.Format(time.RFC3339Nano)+`"`))
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "scheduled", n.Status)
	// A notification due now goes through meanwhile: the worker runs.
	status, now := api.post(t, "/notifications", timedBody("bob@example.com", ""))
	require.Equal(t, http.StatusCreated, status)
	require.Eventually(t, func() bool { return api.timed(t, now.ID).Status == "sent" }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, sink.Count(), "only the one due now")
	require.Equal(t, "scheduled", api.timed(t, n.ID).Status)
	require.Less(t, time.Since(start), delay, "too slow to check anything before send_at")

	require.NoError(t, p.Stop(30*time.Second))
	for time.Now().Before(sendAt.Add(200 * time.Millisecond)) {
		time.Sleep(20 * time.Millisecond) // the send_at passes while serve is down
	}
	startHerald(t, dir, env, "serve")
	waitHTTP(t, api.base+"/healthz")
	require.Eventually(t, func() bool { return api.timed(t, n.ID).Status == "sent" }, 15*time.Second, 10*time.Millisecond)
	got := time.Now()
	require.Equal(t, 2, sink.Count())
	for id, c := range sink.CountByMessageID() {
		require.Equal(t, 1, c, "%s sent %d times", id, c)
	}
	require.GreaterOrEqual(t, testenv.Waited(start, got), testenv.NotBefore(delay))
	sentAt, err := time.Parse(time.RFC3339Nano, *api.timed(t, n.ID).SentAt)
	require.NoError(t, err)
	require.False(t, sentAt.Before(sendAt), "recorded sent at %s, before its send_at %s", sentAt, sendAt)
}

// PostgreSQL + RabbitMQ: a notification whose event the relay has already
// published (it sits in notifications.send) is canceled while no worker
// runs; the worker then takes the event and sends nothing.
func TestCancelAfterPublishNeverSent(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI(nil)
	s.start("relay")
	s.waitTopology()
	sendAt := time.Now().Add(time.Second).UTC()
	status, n := s.api.post(t, "/notifications", timedBody("ann@example.com", `,"send_at":"`+sendAt.Format(time.RFC3339Nano)+`"`))
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "scheduled", n.Status)
	require.Eventually(t, func() bool { return s.queueDepth("notifications.send") == 1 }, 15*time.Second, 20*time.Millisecond,
		"the relay publishes the event once it is due")
	require.False(t, time.Now().Before(sendAt), "published before send_at")

	status, c := s.api.post(t, "/notifications/"+n.ID+"/cancel", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "canceled", c.Status)
	status, _ = s.api.post(t, "/notifications/"+n.ID+"/cancel", "")
	require.Equal(t, http.StatusOK, status, "idempotent")

	s.start("worker")
	require.Eventually(t, func() bool { return s.queueDepth("notifications.send") == 0 }, 15*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM processed_messages WHERE processed_at IS NOT NULL`) == 1
	}, 15*time.Second, 20*time.Millisecond, "the worker took the event and recorded it done")
	require.Zero(t, s.smtp.Count(), "a canceled notification was sent")
	require.Zero(t, s.count(`SELECT count(*) FROM delivery_attempts`))
	require.Equal(t, "canceled", s.api.timed(t, n.ID).Status)
}

// The embedded default during a provider outage: a notification whose
// expires_at passes while its mail server is down ends expired when the
// server is back, and is not sent.
func TestExpiryDuringOutageNotSent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	smtpAddr := freeAddr(t) // nothing listens: the provider is down
	addr := freeAddr(t)
	startHerald(t, dir, map[string]string{
		"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(dir, "herald.db"),
		"HERALD_HTTP_ADDR":    addr, "HERALD_SMTP_URL": "smtp://" + smtpAddr, "HERALD_SMTP_FROM": "herald@example.com",
	}, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")
	expires := time.Now().Add(1500 * time.Millisecond).UTC()
	status, n := api.post(t, "/notifications", timedBody("ann@example.com", `,"expires_at":"`+expires.Format(time.RFC3339Nano)+`"`))
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "pending", n.Status)
	for time.Now().Before(expires.Add(100 * time.Millisecond)) {
		time.Sleep(20 * time.Millisecond) // the expiry passes during the outage
	}
	sink := smtptest.Start(t, smtptest.WithAddr(smtpAddr))
	require.Eventually(t, func() bool { return api.timed(t, n.ID).Status == "expired" }, 60*time.Second, 50*time.Millisecond)
	require.Zero(t, sink.Count())
	require.Zero(t, sink.Attempts())
}

// herald notifications cancel ID: cancels a pending notification in the
// database and prints it canceled; a second time changes nothing; a
// notification settled otherwise, or an unknown id, is an error that says
// so; list and show print a scheduled one as scheduled.
func TestNotificationsCancelCommand(t *testing.T) {
	t.Parallel()
	dbURL, ids := notificationsDB(t, 1)
	id := notify.FormatID(ids[0])
	out, _, err := cliRun(t, dbURL, "notifications", "cancel", id)
	require.NoError(t, err)
	require.Regexp(t, `status\s+canceled`, out)
	require.Contains(t, out, "canceled_at")
	out, _, err = cliRun(t, dbURL, "notifications", "cancel", "--json", id)
	require.NoError(t, err, "a second cancel is the same")
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, "canceled", v["status"])
	_, _, err = cliRun(t, dbURL, "notifications", "cancel", "999")
	require.ErrorIs(t, err, notify.ErrNotFound)
	_, _, err = cliRun(t, dbURL, "notifications", "cancel", "x")
	require.Error(t, err)

	path := strings.TrimPrefix(dbURL, "sqlite:")
	st, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	require.NoError(t, err)
	defer st.Close()
	at := time.Now().Add(time.Hour)
	c, err := st.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b", SendAt: &at}})
	require.NoError(t, err)
	sid := notify.FormatID(c.Notification.ID)
	out, _, err = cliRun(t, dbURL, "notifications", "show", sid)
	require.NoError(t, err)
	require.Regexp(t, `status\s+scheduled`, out)
	require.Contains(t, out, "send_at")
	out, _, err = cliRun(t, dbURL, "notifications", "list", "--status", "scheduled")
	require.NoError(t, err)
	require.Contains(t, out, "scheduled")
	require.Contains(t, out, sid)
}
