package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/pgtest"
)

// batchStore is what the batch tests need of a store: the API's seam, the
// backlog to count events, and a way to stop answering.
type batchStore interface {
	api.Notifications
	api.BacklogStats
}

// batchEngines open a fresh, migrated store of each engine; close stops it
// (the store fails from then on).
var batchEngines = []struct {
	name string
	open func(t *testing.T) (s batchStore, close func())
}{
	{"sqlite", func(t *testing.T) (batchStore, func()) {
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		require.NoError(t, st.Migrate(t.Context()))
		return st, func() { _ = st.Close() }
	}},
	{"postgres", func(t *testing.T) (batchStore, func()) {
		st, err := postgres.Open(t.Context(), pgtest.URL(t), postgres.Config{})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		require.NoError(t, st.Migrate(t.Context()))
		return st, st.Close
	}},
}

// batchEnv is an API over one engine's store, over real HTTP.
type batchEnv struct {
	url   string
	store batchStore
	close func()
}

func batchSetup(t *testing.T, open func(t *testing.T) (batchStore, func()), cfg api.Config) *batchEnv {
	t.Helper()
	st, closeStore := open(t)
	a, err := api.New(st, cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return &batchEnv{url: srv.URL, store: st, close: closeStore}
}

// stored counts the notifications and the unprocessed outbox events.
func (e *batchEnv) stored(t *testing.T) (notifications, events int) {
	t.Helper()
	f := notify.ListFilter{Limit: 500}
	for {
		page, err := e.store.List(t.Context(), f)
		require.NoError(t, err)
		notifications += len(page.Items)
		if page.Next == nil {
			break
		}
		f.After = page.Next
	}
	st, err := e.store.OutboxStats(t.Context())
	require.NoError(t, err)
	return notifications, int(st.Unprocessed + st.Scheduled) // due or not
}

// batchBody renders {"notifications": items}.
func batchBody(t testing.TB, items ...any) string {
	t.Helper()
	raw := make([]json.RawMessage, len(items))
	for i, it := range items {
		if s, ok := it.(string); ok {
			raw[i] = json.RawMessage(s)
			continue
		}
		b, err := json.Marshal(it)
		require.NoError(t, err)
		raw[i] = b
	}
	b, err := json.Marshal(map[string]any{"notifications": raw})
	require.NoError(t, err)
	return string(b)
}

// item is a valid email create request with some fields replaced (nil
// removes one), as a map for batchBody.
func item(i int, changes map[string]any) map[string]any {
	m := map[string]any{"user_id": "u-" + strconv.Itoa(i), "channel": "email", "to": "a@example.com", "subject": "Hello " + strconv.Itoa(i), "body": "Body"}
	for k, v := range changes {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	return m
}

// results returns a 207's results.
func results(t testing.TB, r reply) []map[string]any {
	t.Helper()
	require.Equal(t, http.StatusMultiStatus, r.status, r.raw)
	var out []map[string]any
	for _, v := range r.json["results"].([]any) {
		out = append(out, v.(map[string]any))
	}
	return out
}

func resultError(t testing.TB, res map[string]any, status int, code, field string) {
	t.Helper()
	require.EqualValues(t, status, res["status"], "%v", res)
	e := res["error"].(map[string]any)
	require.Equal(t, code, e["code"], "%v", res)
	require.Equal(t, field, e["field"], "%v", res)
	require.NotContains(t, res, "id")
}

func TestBatch(t *testing.T) {
	t.Parallel()
	for _, eng := range batchEngines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			t.Run("MixedItems", func(t *testing.T) {
				t.Parallel()
				reg := prometheus.NewRegistry()
				e := batchSetup(t, eng.open, api.Config{Registerer: reg})
				r := do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t,
					item(0, nil),
					item(1, map[string]any{"to": nil}),
					item(2, map[string]any{"idempotency_key": "k-2"}),
					item(3, map[string]any{"priority_typo": "x"}),
					`"not an object"`,
					item(5, map[string]any{"channel": "sms"}),
					item(6, map[string]any{"idempotency_key": ""}),
					item(7, map[string]any{"body": strings.Repeat("b", api.DefaultMaxBodyBytes)}),
					item(8, nil),
				))
				res := results(t, r)
				require.Len(t, res, 9)
				resultError(t, res[1], 400, "invalid_field", "notifications[1].to")
				resultError(t, res[3], 400, "unknown_field", "notifications[3].priority_typo")
				resultError(t, res[4], 400, "invalid_json", "notifications[4]")
				resultError(t, res[5], 400, "invalid_field", "notifications[5].channel")
				resultError(t, res[6], 400, "invalid_field", "notifications[6].idempotency_key")
				resultError(t, res[7], 413, "too_large", "notifications[7]")
				require.Contains(t, res[1]["error"].(map[string]any)["message"], "notifications[1]: to ")
				var ids []string
				for _, i := range []int{0, 2, 8} {
					require.EqualValues(t, 201, res[i]["status"], "%v", res[i])
					require.NotContains(t, res[i], "replayed")
					id := res[i]["id"].(string)
					ids = append(ids, id)
					got := do(t, "GET", e.url+"/notifications/"+id, nil, "")
					require.Equal(t, 200, got.status)
					require.Equal(t, "u-"+strconv.Itoa(i), got.json["user_id"], "result %d answers item %d", i, i)
				}
				require.Less(t, mustID(t, ids[0]), mustID(t, ids[1]))
				require.Less(t, mustID(t, ids[1]), mustID(t, ids[2]))
				n, ev := e.stored(t)
				require.Equal(t, 3, n)
				require.Equal(t, 3, ev)
				require.InDelta(t, 3, testutil.ToFloat64(mustCounter(t, reg, "201")), 0)
				require.InDelta(t, 5, testutil.ToFloat64(mustCounter(t, reg, "400")), 0)
				require.InDelta(t, 1, testutil.ToFloat64(mustCounter(t, reg, "413")), 0)
			})
			t.Run("TimedItems", func(t *testing.T) {
				t.Parallel()
				e := batchSetup(t, eng.open, api.Config{})
				sendAt := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
				r := do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t,
					item(0, map[string]any{"send_at": sendAt.Format(time.RFC3339)}),
					item(1, map[string]any{"time_zone": "Mars/Olympus", "quiet_hours": map[string]any{"start": "22:00", "end": "08:00"}}),
					item(2, map[string]any{"send_at": sendAt.Format(time.RFC3339), "expires_at": sendAt.Add(-time.Minute).Format(time.RFC3339)}),
				))
				res := results(t, r)
				require.Len(t, res, 3)
				require.EqualValues(t, 201, res[0]["status"], "%v", res[0])
				resultError(t, res[1], 400, "invalid_field", "notifications[1].time_zone")
				resultError(t, res[2], 400, "invalid_field", "notifications[2].expires_at")
				got := do(t, "GET", e.url+"/notifications/"+res[0]["id"].(string), nil, "")
				require.Equal(t, 200, got.status)
				require.Equal(t, "scheduled", got.json["status"])
				require.Equal(t, sendAt.Format(time.RFC3339), got.json["send_at"])
				n, ev := e.stored(t)
				require.Equal(t, 1, n)
				require.Equal(t, 1, ev)
			})
			t.Run("IdempotencyKeys", func(t *testing.T) {
				t.Parallel()
				e := batchSetup(t, eng.open, api.Config{})
				single := do(t, "POST", e.url+"/notifications", jsonHeaders("Idempotency-Key", "s"), body(t, nil))
				require.Equal(t, 201, single.status)
				first := results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t,
					item(0, map[string]any{"idempotency_key": "k"}),
					item(0, map[string]any{"idempotency_key": "k"}),
					item(0, map[string]any{"idempotency_key": "k", "body": "another"}),
					item(1, map[string]any{"idempotency_key": "k"}),
					mustMap(t, body(t, map[string]any{"idempotency_key": "s"})),
				)))
				require.EqualValues(t, 201, first[0]["status"])
				require.NotContains(t, first[0], "replayed")
				require.EqualValues(t, 201, first[1]["status"], "the key repeated in the batch answers the first create")
				require.Equal(t, true, first[1]["replayed"])
				require.Equal(t, first[0]["id"], first[1]["id"])
				resultError(t, first[2], 409, "idempotency_conflict", "notifications[2].idempotency_key")
				require.EqualValues(t, 201, first[3]["status"], "another user's key is another key")
				require.NotEqual(t, first[0]["id"], first[3]["id"])
				require.Equal(t, true, first[4]["replayed"], "a single create's key answers in a batch")
				require.Equal(t, single.json["id"], first[4]["id"])

				again := results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t,
					item(1, map[string]any{"idempotency_key": "k"}),
					item(0, map[string]any{"idempotency_key": "k"}),
				)))
				require.Equal(t, first[3]["id"], again[0]["id"])
				require.Equal(t, first[0]["id"], again[1]["id"])
				require.Equal(t, true, again[0]["replayed"])
				require.Equal(t, true, again[1]["replayed"])
				n, ev := e.stored(t)
				require.Equal(t, 3, n)
				require.Equal(t, 3, ev)

				// The request's Idempotency-Key header is refused: keys are
				// the items'.
				r := do(t, "POST", e.url+"/notifications/batch", jsonHeaders("Idempotency-Key", "k"), batchBody(t, item(9, nil)))
				requireError(t, r, 400, "invalid_header", "Idempotency-Key")
			})
			t.Run("WholeRequest", func(t *testing.T) {
				t.Parallel()
				var shed atomic.Bool
				e := batchSetup(t, eng.open, api.Config{MaxBatch: 3, MaxBatchBytes: 4096, DebugFaults: true,
					Admission: func(context.Context) error {
						if shed.Load() {
							return &api.RetryAfterError{After: time.Second}
						}
						return nil
					}})
				post := func(body string, kv ...string) reply {
					return do(t, "POST", e.url+"/notifications/batch", jsonHeaders(kv...), body)
				}
				r := post(batchBody(t, item(0, nil), item(1, nil), item(2, nil), item(3, nil)))
				requireError(t, r, 413, "too_large", "notifications")
				require.Contains(t, r.errString("message"), "at most 3")
				requireError(t, post(batchBody(t, item(0, map[string]any{"body": strings.Repeat("b", 5000)}))), 413, "too_large", "")
				requireError(t, post(`{"notifications": []}`), 400, "invalid_field", "notifications")
				requireError(t, post(`{"notifications": null}`), 400, "invalid_field", "notifications")
				requireError(t, post(`{}`), 400, "invalid_field", "notifications")
				requireError(t, post(`{"notifications": {}}`), 400, "invalid_field", "notifications")
				requireError(t, post(`[]`), 400, "invalid_json", "")
				requireError(t, post(`{"notifications": [], "x": 1}`), 400, "unknown_field", "x")
				requireError(t, post(`{"Notifications": []}`), 400, "unknown_field", "Notifications")
				requireError(t, post(`{"notifications": [{}], "notifications": [{}]}`), 400, "invalid_field", "notifications")
				requireError(t, post(`{"notifications": [{}]} {}`), 400, "invalid_json", "")
				requireError(t, post(batchBody(t, item(0, nil)), "Content-Type", "text/plain"), 415, "unsupported_media_type", "")
				requireError(t, post(batchBody(t, item(0, nil), item(1, nil)), "X-Herald-Fault", notify.FaultAfterOutboxInsert), 500, "injected_fault", "")
				shed.Store(true)
				r = post(batchBody(t, item(0, nil)))
				requireError(t, r, 429, "too_many_requests", "")
				require.Equal(t, "1", r.header.Get("Retry-After"))
				// A batch with no valid item writes nothing and is not
				// shed: there is nothing to admit.
				res := results(t, post(batchBody(t, item(0, map[string]any{"to": nil}))))
				resultError(t, res[0], 400, "invalid_field", "notifications[0].to")
				shed.Store(false)
				n, ev := e.stored(t)
				require.Zero(t, n)
				require.Zero(t, ev)

				// A store that fails answers 503 for the whole batch.
				e.close()
				requireError(t, post(batchBody(t, item(0, nil))), 503, "unavailable", "")
			})
			t.Run("Full", func(t *testing.T) {
				t.Parallel()
				e := batchSetup(t, eng.open, api.Config{})
				items := make([]any, notify.MaxBatch+1)
				for i := range items {
					items[i] = item(i, nil)
				}
				r := do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t, items...))
				requireError(t, r, 413, "too_large", "notifications")
				require.Contains(t, r.errString("message"), "at most 1000")
				res := results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t, items[:notify.MaxBatch]...)))
				require.Len(t, res, notify.MaxBatch)
				for i, x := range res {
					require.EqualValues(t, 201, x["status"], "item %d", i)
				}
				n, ev := e.stored(t)
				require.Equal(t, notify.MaxBatch, n)
				require.Equal(t, notify.MaxBatch, ev)
			})
			t.Run("Token", func(t *testing.T) {
				t.Parallel()
				e := batchSetup(t, eng.open, api.Config{Token: "t0k"})
				requireError(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t, item(0, nil))), 401, "unauthorized", "")
				res := results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders("Authorization", "Bearer t0k"), batchBody(t, item(0, nil))))
				require.EqualValues(t, 201, res[0]["status"])
			})
		})
	}
}

func mustID(t testing.TB, s string) int64 {
	t.Helper()
	id, ok := notify.ParseID(s)
	require.True(t, ok, s)
	return id
}

func mustMap(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	return m
}

func mustCounter(t testing.TB, reg *prometheus.Registry, status string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "herald_batch_items_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == status {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "c"}, func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	t.Fatalf("no herald_batch_items_total{status=%q}", status)
	return nil
}
