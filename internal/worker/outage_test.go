package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/testkit/webhooktest"
	"github.com/heraldhq/herald/internal/worker"
)

// outageStore is what TestWebhookOutageIsVisible needs of a store: the
// worker's seams, and what the API reads.
type outageStore interface {
	realStore
	worker.DestinationBook
	ListDestinations(ctx context.Context, f notify.DestinationFilter) (notify.DestinationPage, error)
}

// Issue 38 point 2: a webhook endpoint that refuses connections, probed
// again and again (a short backoff: many probes in a short outage), is
// visible: its destination is listed failing, with why, since when and
// its pending count; each waiting notification tells why it waits; and a
// notification's attempts stay one row per outage however many probes
// found the endpoint down (a row per probe before). Once the endpoint
// listens, everything is sent and the record goes. On SQLite and
// PostgreSQL, through the real webhook sender over real HTTP.
func TestWebhookOutageIsVisible(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) realStore{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, ok := open(t).(outageStore)
			require.True(t, ok, "the store keeps destinations")
			webhookOutage(t, st)
		})
	}
}

func webhookOutage(t *testing.T, st outageStore) {
	ctx := t.Context()
	// A port nothing listens on: connects are refused, until the
	// endpoint starts on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	url := "http://" + addr + "/hook"
	key := webhook.DestinationKey(url)
	require.NotEmpty(t, key)

	const n = 3
	var ids []int64
	for i := range n {
		c, err := st.Create(ctx, notify.NewNotification{Destination: key, Request: notify.CreateRequest{
			UserID: fmt.Sprintf("u%d", i), Channel: "webhook", To: url, Body: `{"n":` + fmt.Sprint(i) + `}`}})
		require.NoError(t, err)
		ids = append(ids, c.Notification.ID)
	}
	msgs, err := st.Claim(ctx, "outage-test", n, time.Hour)
	require.NoError(t, err)
	require.Len(t, msgs, n)

	secret, _ := webhooktest.NewSecret()
	hooks, err := webhook.New(webhook.Config{Secret: secret, Timeout: 5 * time.Second,
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = hooks.Close() })
	src := newParkingSource(4, msgs)
	w, err := worker.New(src, st, map[string]worker.Channel{
		"webhook": {Sender: hooks, Provider: "webhook endpoint", SendTimeout: 5 * time.Second},
	}, worker.Config{SenderBackoff: 5 * time.Millisecond, SenderBackoffMax: 20 * time.Millisecond, StoreBackoff: 10 * time.Millisecond,
		Destinations: st})
	require.NoError(t, err)
	runWorker(t, w)

	// The destination is listed failing, with its pending count; each
	// notification tells why it waits.
	var rec notify.Destination
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := st.ListDestinations(ctx, notify.DestinationFilter{Limit: 10})
		if !assert.NoError(c, err) || !assert.Len(c, p.Items, 1) {
			return
		}
		rec = p.Items[0]
		assert.Equal(c, key, rec.Key)
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, "webhook", rec.Channel)
	require.Equal(t, notify.DestinationFailing, rec.State)
	require.Contains(t, rec.Reason, "refused")
	require.EqualValues(t, n, rec.Pending)
	require.WithinDuration(t, time.Now(), rec.Since, time.Minute)
	require.Equal(t, time.UTC, rec.Since.Location())
	for _, id := range ids {
		got, err := st.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, notify.StatusPending, got.Status)
		require.Zero(t, got.Attempts, "no attempt spent")
		require.NotNil(t, got.Waiting, "notification %d tells why it waits", id)
		require.Equal(t, key, got.Waiting.Destination)
		require.Contains(t, got.Waiting.Reason, "refused")
		require.Equal(t, rec.Since, got.Waiting.Since)
	}

	// Many probes later, each notification holds at most one row for the
	// outage.
	const probes = 30
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		total := 0
		for _, id := range ids {
			as, err := st.Attempts(ctx, id)
			if !assert.NoError(c, err) {
				return
			}
			for _, a := range as {
				total += 1 + a.Repeats
			}
		}
		assert.GreaterOrEqual(c, total, probes, "probes so far")
	}, 60*time.Second, 50*time.Millisecond)
	total := 0
	for _, id := range ids {
		as, err := st.Attempts(ctx, id)
		require.NoError(t, err)
		// A probe in flight (its claim started, not yet recorded) has a
		// row of its own until its record folds it.
		finished := slices.DeleteFunc(slices.Clone(as), func(a notify.Attempt) bool { return a.FinishedAt == nil })
		require.LessOrEqual(t, len(finished), 1, "notification %d: one row per outage, not one per probe: %+v", id, as)
		require.LessOrEqual(t, len(as)-len(finished), 1, "notification %d: one probe in flight at most", id)
		for _, a := range finished {
			require.Equal(t, notify.AttemptDeferred, a.Outcome)
			require.Equal(t, notify.DeferDown, a.Deferral)
			require.Contains(t, a.Error, "refused")
			total += 1 + a.Repeats
		}
	}
	t.Logf("%d probes found the endpoint down, in at most one row per notification", total)

	// The endpoint listens: everything is sent, the record goes, nothing
	// waits.
	got := make(chan string, 100)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- r.Header.Get("webhook-id")
		rw.WriteHeader(http.StatusNoContent)
	}))
	srv.Listener, err = net.Listen("tcp", addr)
	require.NoError(t, err, "the endpoint's port was taken meanwhile")
	srv.Start()
	t.Cleanup(srv.Close)
	waitStatus(t, st, ids, notify.StatusSent, 30*time.Second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := st.ListDestinations(ctx, notify.DestinationFilter{Limit: 10})
		assert.NoError(c, err)
		assert.Empty(c, p.Items)
	}, 20*time.Second, 20*time.Millisecond)
	for _, id := range ids {
		n, err := st.Get(ctx, id)
		require.NoError(t, err)
		require.Nil(t, n.Waiting)
		require.Equal(t, 1, n.Attempts)
		as, err := st.Attempts(ctx, id)
		require.NoError(t, err)
		require.LessOrEqual(t, len(as), 2)
		require.Equal(t, notify.AttemptSent, as[len(as)-1].Outcome)
	}
	require.GreaterOrEqual(t, len(got), n, "the endpoint received every notification")
}
