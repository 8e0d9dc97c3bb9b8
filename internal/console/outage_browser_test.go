package console

import (
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// Issue 38 point 2, in a browser: a notification waiting on a failing
// destination says so on its page, with its newest attempts first (a
// deferral repeated through one outage is one row, "and N more") and a
// link to the older ones; the Destinations page names every destination
// that is not up, a page at a time, filtered by state.
func TestConsoleOutageInBrowser(t *testing.T) {
	go startBrowser(chromium(t))
	path := filepath.Join(t.TempDir(), "herald.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	c, err := New(st, st, deadletter.New(st, nil), withFilters(Config{SessionTTL: time.Hour, RefreshEvery: time.Minute, Destinations: st}))
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)

	const key = "https://hooks.example.com:443"
	created, err := st.Create(t.Context(), notify.NewNotification{Destination: key, Request: notify.CreateRequest{
		UserID: "u", Channel: "webhook", To: "https://hooks.example.com/h", Body: "{}"}})
	require.NoError(t, err)
	id := created.Notification.ID
	// 25 attempts, as a worker leaves them: 24 retries of a redriven
	// notification, then one deferral that 53 more probes found again.
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	at := func(m int) string {
		return time.Date(2026, 5, 1, 12, m, 0, 0, time.UTC).Format("2006-01-02T15:04:05.000000Z")
	}
	for i := 1; i <= 24; i++ {
		_, err := db.Exec(`INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at, finished_at, outcome, error)
			VALUES (?, 1, ?, ?, ?, 'retry', ?)`, id, i, at(i), at(i), fmt.Sprintf("500 error %d", i))
		require.NoError(t, err)
	}
	_, err = db.Exec(`INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at, finished_at, outcome, error, deferral, repeats, last_at)
		VALUES (?, 2, 25, ?, ?, 'deferred', 'cannot connect: connection refused', 'down', 53, ?)`, id, at(30), at(30), at(59))
	require.NoError(t, err)
	_, err = st.DestinationFailing(t.Context(), "webhook", key, "webhook endpoint down: cannot connect: connection refused",
		time.Date(2026, 5, 1, 12, 30, 0, 0, time.UTC))
	require.NoError(t, err)
	// More destinations than a page holds, one disabled.
	for i := range 55 {
		_, err := st.DestinationFailing(t.Context(), "webhook", fmt.Sprintf("https://d%02d.example.com:443", i), "refused", time.Now())
		require.NoError(t, err)
	}
	ok, err := st.DisableDestination(t.Context(), "https://d07.example.com:443", "failing for 72h")
	require.NoError(t, err)
	require.True(t, ok)

	b := newTab(t)
	detail := srv.URL + "/ui/notifications/" + notify.FormatID(id)
	require.Equal(t, http.StatusOK, b.nav(detail))
	waiting := b.text("#waiting")
	require.Contains(t, waiting, key)
	require.Contains(t, waiting, "failing")
	require.Contains(t, waiting, "connection refused")
	require.Equal(t, 20, js[int](b, `document.querySelectorAll("#attempts tbody tr").length`), "the newest 20")
	require.Equal(t, "25", strings.TrimSpace(b.text("#attempts tbody tr:first-child td[data-label='#']")), "newest first")
	require.Equal(t, "deferred", strings.TrimSpace(b.text("#attempts tbody tr:first-child td.outcome")))
	require.Contains(t, b.text("#attempts tbody tr:first-child .repeats"), "and 53 more")
	require.Contains(t, b.text("#history"), "deferred 53 more times")
	require.Empty(t, b.text("#newest-attempts"))

	require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#older-attempts"))))
	require.Contains(t, b.location(), "attempts=")
	require.Equal(t, 5, js[int](b, `document.querySelectorAll("#attempts tbody tr").length`), "the 5 older ones")
	require.Equal(t, "5", strings.TrimSpace(b.text("#attempts tbody tr:first-child td[data-label='#']")))
	require.Equal(t, "1", strings.TrimSpace(b.text("#attempts tbody tr:last-child td[data-label='#']")))
	require.Empty(t, b.text("#older-attempts"), "the oldest page has no older link")
	require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#newest-attempts"))))
	require.Equal(t, "25", strings.TrimSpace(b.text("#attempts tbody tr:first-child td[data-label='#']")))
	require.Equal(t, http.StatusBadRequest, b.nav(detail+"?attempts=not-a-cursor"))

	// The link to the destinations, then their pages.
	require.Equal(t, http.StatusOK, b.nav(detail))
	require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#waiting a"))))
	require.Equal(t, "/ui/destinations", b.location())
	require.Equal(t, 50, js[int](b, `document.querySelectorAll("#destinations tbody tr").length`))
	require.Equal(t, "https://d00.example.com:443", strings.TrimSpace(b.text("#destinations tbody tr:first-child td[data-label='Key']")))
	require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#next-page"))))
	rows := js[int](b, `document.querySelectorAll("#destinations tbody tr").length`)
	require.Equal(t, 6, rows, "55 + 1 records, 50 a page")
	last := b.text("#destinations tbody tr:last-child")
	require.Contains(t, last, key)
	require.Contains(t, last, "connection refused")
	require.Equal(t, "1", strings.TrimSpace(b.text("#destinations tbody tr:last-child td[data-label='Pending']")))
	require.Empty(t, b.text("#next-page"))

	b.do(chromedp.SetValue(chromedp.CSS("#state"), "disabled"))
	require.Equal(t, http.StatusOK, b.load(chromedp.Click(chromedp.CSS("#destination-filter button"))))
	require.Equal(t, "/ui/destinations?state=disabled", b.location())
	require.Equal(t, 1, js[int](b, `document.querySelectorAll("#destinations tbody tr").length`))
	require.Contains(t, b.text("#destinations tbody"), "https://d07.example.com:443")
	require.Contains(t, b.text("#destinations tbody"), "failing for 72h")
}
