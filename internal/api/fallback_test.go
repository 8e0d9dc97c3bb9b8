package api_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// A create with a fallback list goes on the first channel the recipient
// has an address for and allows, keeps the later ones as its hops, and
// shows them; bad lists are refused, naming the field, with nothing
// written.
func TestFallbackCreate(t *testing.T) {
	t.Parallel()
	e := setupPreferences(t, "")
	h := authed()
	r := do(t, "PUT", e.url+"/templates/shipped", h, `{"channel":"webhook","text":"{\"order\":\"{{.order}}\"}"}`)
	require.Equal(t, 201, r.status, r.raw)
	r = do(t, "PUT", e.url+"/templates/shipped", h, `{"channel":"email","subject":"Order {{.order}}","text":"Order {{.order}} shipped"}`)
	require.Equal(t, 201, r.status, r.raw)
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/both", h, `{"email":"both@example.com","webhook_url":"https://hooks.example.com/both"}`).status)
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/mail-only", h, `{"email":"mail@example.com"}`).status)
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/none", h, `{"locale":"de"}`).status)
	create := func(body string) reply {
		t.Helper()
		return do(t, "POST", e.url+"/notifications", h, body)
	}

	c := create(`{"user_id":"both","channels":["webhook","email"],"template":"shipped","data":{"order":"A-1"},"category":"orders"}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "webhook", c.json["channel"])
	require.Equal(t, "https://hooks.example.com/both", c.json["to"])
	require.Equal(t, []any{"email"}, c.json["fallback_channels"])
	require.NotContains(t, c.json, "fallback_of")
	got := do(t, "GET", e.url+"/notifications/"+c.json["id"].(string), h, "")
	require.Equal(t, 200, got.status)
	require.Equal(t, `{"order":"A-1"}`, got.json["body"])
	require.Equal(t, []any{"email"}, got.json["fallback_channels"])

	// channel may be given too, as the list's first (the OpenAPI
	// document's shapes are told apart by it).
	c = create(`{"user_id":"both","channel":"webhook","channels":["webhook","email"],"template":"shipped","data":{"order":"A-0"}}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "webhook", c.json["channel"])
	require.Equal(t, []any{"email"}, c.json["fallback_channels"])

	// No webhook URL: the email is the notification, with no hop left.
	c = create(`{"user_id":"mail-only","channels":["webhook","email"],"template":"shipped","data":{"order":"A-2"}}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "email", c.json["channel"])
	require.Equal(t, "Order A-2", c.json["subject"])
	require.NotContains(t, c.json, "fallback_channels")

	// An opt-out of the category on the webhook: the email goes first.
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/both/preferences", h, `{"categories":{"orders":{"webhook":false}}}`).status)
	c = create(`{"user_id":"both","channels":["webhook","email"],"template":"shipped","data":{"order":"A-3"},"category":"orders"}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "email", c.json["channel"])
	require.Equal(t, "pending", c.json["status"])
	// Opted out of both: the first with an address, suppressed.
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/both/preferences", h, `{"categories":{"orders":{"webhook":false,"email":false}}}`).status)
	c = create(`{"user_id":"both","channels":["webhook","email"],"template":"shipped","data":{"order":"A-4"},"category":"orders"}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "webhook", c.json["channel"])
	require.Equal(t, "suppressed", c.json["status"])

	nBefore, oBefore := e.rows(t)
	for _, tc := range []struct {
		body   string
		status int
		field  string
	}{
		{`{"user_id":"both","channels":["webhook","email"],"channel":"email","template":"shipped"}`, 400, "channel"},
		{`{"user_id":"both","channels":["webhook","email"],"to":"a@example.com","template":"shipped"}`, 400, "to"},
		{`{"user_id":"both","channels":["webhook","email"],"subject":"s","body":"b"}`, 400, "template"},
		{`{"user_id":"both","channels":[],"template":"shipped"}`, 400, "channels"},
		{`{"user_id":"both","channels":["email","email"],"template":"shipped"}`, 400, "channels"},
		{`{"user_id":"both","channels":["sms"],"template":"shipped"}`, 400, "channels"},
		{`{"user_id":"both","channels":"email","template":"shipped"}`, 400, "channels"},
		{`{"user_id":"none","channels":["webhook","email"],"template":"shipped","data":{"order":"x"}}`, 422, "channels"},
		{`{"user_id":"nobody","channels":["webhook","email"],"template":"shipped","data":{"order":"x"}}`, 422, "user_id"},
		{`{"user_id":"both","channels":["webhook","email"],"template":"shipped"}`, 422, "data.order"},
		{`{"user_id":"both","channels":["webhook","email"],"template":"unknown","data":{"order":"x"}}`, 422, "template"},
	} {
		r := create(tc.body)
		require.Equal(t, tc.status, r.status, "%s: %s", tc.body, r.raw)
		require.Equal(t, tc.field, r.errField(), "%s: %s", tc.body, r.raw)
	}
	n, o := e.rows(t)
	require.Equal(t, []int{nBefore, oBefore}, []int{n, o}, "a refused create writes nothing")
}

// countingRecipients counts the recipient reads of the store it wraps.
type countingRecipients struct {
	api.Recipients
	reads atomic.Int64
}

func (c *countingRecipients) Recipient(ctx context.Context, userID string) (notify.Recipient, error) {
	c.reads.Add(1)
	return c.Recipients.Recipient(ctx, userID)
}

// A create with a fallback list reads its recipient and its template once,
// however many channels it lists.
func TestFallbackCreateReadsRecipientOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(ctx))
	recs := &countingRecipients{Recipients: st}
	a, err := api.New(st, api.Config{Recipients: recs, Templates: st, Preferences: st,
		Channels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": notify.ChannelSpec{JSONBody: true, To: "an http(s) URL", Validate: webhook.Validate, RecipientField: "webhook_url"}}})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	h := jsonHeaders()
	require.Equal(t, 201, do(t, "PUT", srv.URL+"/templates/shipped", h, `{"channel":"webhook","text":"{\"order\":\"{{.order}}\"}"}`).status)
	require.Equal(t, 201, do(t, "PUT", srv.URL+"/templates/shipped", h, `{"channel":"email","subject":"Order {{.order}}","text":"Order {{.order}}"}`).status)
	require.Equal(t, 200, do(t, "PUT", srv.URL+"/recipients/both", h, `{"email":"both@example.com","webhook_url":"https://hooks.example.com/both"}`).status)
	before := recs.reads.Load()
	c := do(t, "POST", srv.URL+"/notifications", h, `{"user_id":"both","channels":["webhook","email"],"template":"shipped","data":{"order":"A-1"}}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, []any{"email"}, c.json["fallback_channels"])
	require.EqualValues(t, 1, recs.reads.Load()-before, "one recipient read for two channels")
}
