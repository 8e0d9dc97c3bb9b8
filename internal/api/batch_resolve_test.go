package api_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
)

// resolvingStore is what a batch of resolved items needs of a store: the
// batch tests' seam, and recipients, templates and preferences.
type resolvingStore interface {
	batchStore
	api.Recipients
	api.Templates
	api.Preferences
}

// resolvedSetup is an API over one engine's store with recipients,
// templates and preferences, over real HTTP. wrap, when not nil, wraps
// the store the API writes with.
func resolvedSetup(t *testing.T, open func(t *testing.T) (batchStore, func()), wrap func(resolvingStore) api.Notifications) (*batchEnv, resolvingStore) {
	t.Helper()
	bs, closeStore := open(t)
	st, ok := bs.(resolvingStore)
	require.True(t, ok, "the store keeps recipients, templates and preferences")
	var writes api.Notifications = st
	if wrap != nil {
		writes = wrap(st)
	}
	a, err := api.New(writes, api.Config{Recipients: st, Templates: st, Preferences: st, RequiredCategories: []string{"security"}})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	e := &batchEnv{url: srv.URL, store: st, close: closeStore}
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/recipients/u-ada", `{"email":"ada@example.com","locale":"de-AT"}`},
		{"PUT", "/recipients/u-bob", `{"email":"bob@example.com"}`},
		{"PUT", "/templates/welcome", `{"channel":"email","subject":"Hi {{.name}}","text":"Hello {{.name}}","html":"<p>Hello {{.name}}</p>"}`},
		{"PUT", "/templates/welcome", `{"channel":"email","locale":"de","subject":"Hallo {{.name}}","text":"Hallo {{.name}}","html":"<p>Hallo {{.name}}</p>"}`},
		{"PUT", "/recipients/u-bob/preferences", `{"categories":{"news":{"email":false}}}`},
	} {
		r := do(t, c.method, e.url+c.path, jsonHeaders(), c.body)
		require.Contains(t, []int{200, 201}, r.status, "%s %s: %s", c.method, c.path, r.raw)
	}
	return e, st
}

// TestBatchResolved: batch items resolve as single creates do (an
// address from the recipient, a template rendered in the recipient's
// locale, a category checked against the preferences), each resolved one
// stored as a single create stores it; an item that does not resolve
// fails alone, naming its index and field, and leaves nothing behind.
func TestBatchResolved(t *testing.T) {
	t.Parallel()
	for _, eng := range batchEngines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			t.Run("Mixed", func(t *testing.T) {
				t.Parallel()
				e, _ := resolvedSetup(t, eng.open, nil)
				templated := map[string]any{"user_id": "u-ada", "channel": "email", "template": "welcome", "data": map[string]any{"name": "<b>Ada</b>"}}
				res := results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t,
					item(0, nil),
					templated,
					item(2, map[string]any{"user_id": "u-bob", "category": "news"}),
					map[string]any{"user_id": "u-ada", "channel": "email", "template": "nope", "data": map[string]any{}},
					item(4, map[string]any{"user_id": "u-nobody", "to": nil}),
					map[string]any{"user_id": "u-ada", "channel": "email", "template": "welcome", "data": map[string]any{}},
					map[string]any{"user_id": "u-ada", "channel": "email", "template": "welcome", "template_version": 9},
					item(7, map[string]any{"user_id": "u-bob", "to": nil, "category": "security"}),
					item(8, map[string]any{"user_id": "u-bob", "category": "bad category"}),
					map[string]any{"user_id": "u-ada", "channels": []string{"email"}, "template": "welcome", "data": map[string]any{"name": "Ada"}},
				)))
				require.Len(t, res, 10)
				resultError(t, res[9], 422, "unsupported_in_batch", "notifications[9].channels")
				resultError(t, res[3], 422, "unprocessable", "notifications[3].template")
				require.Contains(t, res[3]["error"].(map[string]any)["message"], `notifications[3]: unknown template "nope"`)
				resultError(t, res[4], 422, "unprocessable", "notifications[4].user_id")
				resultError(t, res[5], 422, "template_error", "notifications[5].data.name")
				resultError(t, res[6], 422, "unprocessable", "notifications[6].template_version")
				resultError(t, res[8], 400, "invalid_field", "notifications[8].category")
				for _, i := range []int{0, 1, 2, 7} {
					require.EqualValues(t, 201, res[i]["status"], "item %d: %v", i, res[i])
				}
				require.Equal(t, true, res[2]["suppressed"], "u-bob opted out of news by email")
				for _, i := range []int{0, 1, 7} {
					require.NotContains(t, res[i], "suppressed", "item %d", i)
				}
				require.Less(t, mustID(t, res[0]["id"].(string)), mustID(t, res[1]["id"].(string)), "ids follow the items' order")
				require.Less(t, mustID(t, res[2]["id"].(string)), mustID(t, res[7]["id"].(string)))

				got := do(t, "GET", e.url+"/notifications/"+res[1]["id"].(string), nil, "")
				require.Equal(t, 200, got.status, got.raw)
				require.Equal(t, "ada@example.com", got.json["to"], "the address comes from the recipient")
				require.Equal(t, "Hallo <b>Ada</b>", got.json["subject"], "the de variant for locale de-AT")
				require.Equal(t, "Hallo <b>Ada</b>", got.json["body"])
				require.Equal(t, "<p>Hallo &lt;b&gt;Ada&lt;/b&gt;</p>", got.json["html"], "data is escaped in the HTML part")
				require.Equal(t, "welcome", got.json["template"])
				require.EqualValues(t, 2, got.json["template_version"])
				require.Equal(t, "de", got.json["locale"])
				require.Equal(t, "pending", got.json["status"])

				got = do(t, "GET", e.url+"/notifications/"+res[2]["id"].(string), nil, "")
				require.Equal(t, "suppressed", got.json["status"])
				require.Equal(t, "news", got.json["category"])
				got = do(t, "GET", e.url+"/notifications/"+res[7]["id"].(string), nil, "")
				require.Equal(t, "pending", got.json["status"], "a required category is never suppressed")
				require.Equal(t, "bob@example.com", got.json["to"])

				// The bad items left nothing: four notifications, three
				// requested events and the suppressed one's status event.
				n, ev := e.stored(t)
				require.Equal(t, 4, n)
				require.Equal(t, 4, ev)
				page, err := e.store.List(t.Context(), notify.ListFilter{UserID: "u-ada", Limit: 10})
				require.NoError(t, err)
				require.Len(t, page.Items, 1, "of u-ada's four items, only the templated one that rendered is stored")

				// A batch of bad items alone writes nothing.
				res = results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t,
					map[string]any{"user_id": "u-ada", "channel": "email", "template": "nope"})))
				resultError(t, res[0], 422, "unprocessable", "notifications[0].template")
				n, ev = e.stored(t)
				require.Equal(t, 4, n)
				require.Equal(t, 4, ev)
			})
			t.Run("Replay", func(t *testing.T) {
				t.Parallel()
				e, _ := resolvedSetup(t, eng.open, nil)
				keyed := map[string]any{"user_id": "u-ada", "channel": "email", "template": "welcome", "data": map[string]any{"name": "Ada"}, "idempotency_key": "k-1"}
				first := results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t, keyed, item(1, nil))))
				require.EqualValues(t, 201, first[0]["status"], "%v", first[0])
				// The recipient moves: a retry of the same item is the
				// same create, compared as the client gave it.
				r := do(t, "PUT", e.url+"/recipients/u-ada", jsonHeaders(), `{"email":"ada@example.org","locale":"en"}`)
				require.Equal(t, 200, r.status, r.raw)
				again := results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t, keyed)))
				require.EqualValues(t, 201, again[0]["status"], "%v", again[0])
				require.Equal(t, true, again[0]["replayed"])
				require.Equal(t, first[0]["id"], again[0]["id"])
				other := map[string]any{"user_id": "u-ada", "channel": "email", "template": "welcome", "data": map[string]any{"name": "Eve"}, "idempotency_key": "k-1"}
				conflict := results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t, other)))
				resultError(t, conflict[0], 409, "idempotency_conflict", "notifications[0].idempotency_key")
				got := do(t, "GET", e.url+"/notifications/"+first[0]["id"].(string), nil, "")
				require.Equal(t, "ada@example.com", got.json["to"], "what was accepted stays")
				n, _ := e.stored(t)
				require.Equal(t, 2, n)
			})
			t.Run("RecipientChanged", func(t *testing.T) {
				t.Parallel()
				// The recipient changes between the batch's look-up and
				// its write (once): the store writes nothing, and the
				// batch is resolved again from the new record.
				var changed atomic.Bool
				e, _ := resolvedSetup(t, eng.open, func(st resolvingStore) api.Notifications {
					return &changingStore{resolvingStore: st, change: func(ctx context.Context) error {
						if changed.Swap(true) {
							return nil
						}
						_, err := st.PutRecipient(ctx, notify.Recipient{UserID: "u-ada", Addresses: map[string]string{notify.ChannelEmail: "ada@example.org"}})
						return err
					}}
				})
				res := results(t, do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), batchBody(t,
					item(0, nil),
					item(1, map[string]any{"user_id": "u-ada", "to": nil}),
				)))
				require.True(t, changed.Load())
				require.EqualValues(t, 201, res[0]["status"], "%v", res[0])
				require.EqualValues(t, 201, res[1]["status"], "%v", res[1])
				got := do(t, "GET", e.url+"/notifications/"+res[1]["id"].(string), nil, "")
				require.Equal(t, "ada@example.org", got.json["to"], "the address as the recipient is at the commit")
				n, ev := e.stored(t)
				require.Equal(t, 2, n, "the first try wrote nothing")
				require.Equal(t, 2, ev)
			})
		})
	}
}

// changingStore runs change before each CreateBatch: a recipient changed
// by someone else between the API's look-up and the store's write.
type changingStore struct {
	resolvingStore
	change func(ctx context.Context) error
}

func (s *changingStore) CreateBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	if err := s.change(ctx); err != nil {
		return nil, err
	}
	return s.resolvingStore.CreateBatch(ctx, nns)
}
