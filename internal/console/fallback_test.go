package console

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

// A notification's page shows its fallback list, and links a dead
// letter and its hop both ways (issue 35, point 5).
func TestDetailShowsFallback(t *testing.T) {
	t.Parallel()
	srv, st := openConsole(t, "")
	cl := newClient(t)
	ctx := t.Context()
	created, err := st.Create(ctx, notify.NewNotification{
		Request:  notify.CreateRequest{UserID: "u", Channel: "telegram", To: "42", Body: "b"},
		Fallback: []notify.Hop{{Channel: "email", To: "a@example.com", Subject: "s", Body: "b"}}})
	require.NoError(t, err)
	first := created.Notification
	page := func(id int64) string {
		t.Helper()
		resp, err := cl.Get(srv.URL + "/ui/notifications/" + notify.FormatID(id))
		require.NoError(t, err)
		p := read(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return p
	}
	require.Contains(t, page(first.ID), `<dd id="fallback">email, if this one is dead-lettered</dd>`)

	cs, err := deliverytest.Claim(ctx, st, []notify.ClaimRequest{{MessageID: 1, NotificationID: first.ID}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, notify.ClaimTaken, cs[0].Status)
	ok, err := deliverytest.Record(ctx, st, []notify.DeliveryResult{{Claim: cs[0], Outcome: notify.AttemptDead, Error: "400 chat not found"}})
	require.NoError(t, err)
	require.True(t, ok[0])
	got, err := st.Get(ctx, first.ID)
	require.NoError(t, err)
	require.NotZero(t, got.FallbackNext)
	hop := notify.FormatID(got.FallbackNext)
	require.Contains(t, page(first.ID), `<dd id="fallback-next"><a href="/ui/notifications/`+hop+`">`+hop+`</a></dd>`)
	require.Contains(t, page(got.FallbackNext), `<dd id="fallback-of"><a href="/ui/notifications/`+notify.FormatID(first.ID)+`">`)
}
