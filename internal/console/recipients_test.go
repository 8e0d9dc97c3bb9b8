package console

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// The Recipients page shows a user's record as the API does and their
// preferences; its form (a POST with the CSRF token, behind the login)
// records one preference and leaves the others; a refused change changes
// nothing; nothing of the user reaches the log.
func TestRecipientsPage(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	var logs bytes.Buffer
	channels := notify.Channels{notify.ChannelEmail: notify.EmailSpec, "telegram": {}}
	c, err := New(st, st, deadletter.New(st, nil), withFilters(Config{Token: "t0k", SessionTTL: time.Hour, RefreshEvery: time.Second,
		Recipients: st, RequiredCategories: []string{"security"}, Channels: channels,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}))
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)

	const user = "u-<42>"
	_, err = st.PutRecipient(t.Context(), notify.Recipient{UserID: user, Addresses: map[string]string{notify.ChannelEmail: "ada+x@example.com", "telegram": "-1001"},
		Locale: "de-AT", TimeZone: "Europe/Vienna"})
	require.NoError(t, err)
	require.NoError(t, st.PutPreferences(t.Context(), user, notify.Preferences{"digest": {"email": false}}))
	n, err := st.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{UserID: user, Channel: notify.ChannelEmail,
		To: "ada+x@example.com", Subject: "s", Body: "b"}})
	require.NoError(t, err)

	// Behind the login, as every page.
	resp, err := newClient(t).Get(srv.URL + recipientLink(user))
	require.NoError(t, err)
	require.Contains(t, read(t, resp), `name="token"`, "the login form")
	cl := newClient(t)
	code, _, _ := login(t, cl, srv.URL, "t0k")
	require.Equal(t, http.StatusSeeOther, code)

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := cl.Get(srv.URL + path)
		require.NoError(t, err)
		return resp.StatusCode, read(t, resp)
	}
	status, page := get("/ui/recipients")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `href="/ui/recipients" aria-current="page"`)
	require.NotContains(t, page, `id="preferences"`, "no user looked up yet")

	// The notification's page links its user's.
	status, page = get("/ui/notifications/" + notify.FormatID(n.Notification.ID))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `<a href="/ui/recipients?user_id=u-%3C42%3E" id="user-link">u-&lt;42&gt;</a>`)

	status, page = get(recipientLink(user))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `<dd id="recipient-email">ada&#43;x@example.com</dd>`, "the address as stored, escaped, not masked")
	require.Contains(t, page, `<dd id="recipient-telegram">-1001</dd>`)
	require.Contains(t, page, `<dd id="recipient-locale">de-AT</dd>`)
	require.Contains(t, page, `<dd id="recipient-time-zone">Europe/Vienna</dd>`)
	require.Contains(t, page, `<td data-label="Category">digest</td>`)
	require.Contains(t, page, "no (opted out)")
	require.Contains(t, page, "Required categories (no opt-out): security.")
	require.NotContains(t, page, "<42>", "the user id is escaped")
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(t, m, "the forms carry a CSRF token")

	post := func(form url.Values) (int, string) {
		t.Helper()
		resp, err := cl.PostForm(srv.URL+"/ui/recipients/preferences", form)
		require.NoError(t, err)
		return resp.StatusCode, read(t, resp)
	}
	prefs := func() notify.Preferences {
		t.Helper()
		p, err := st.Preferences(t.Context(), user)
		require.NoError(t, err)
		return p
	}
	form := url.Values{"user_id": {user}, "category": {"news"}, "channel": {"telegram"}, "allowed": {"false"}}
	status, _ = post(form)
	require.Equal(t, http.StatusForbidden, status, "no CSRF token")
	require.Equal(t, notify.Preferences{"digest": {"email": false}}, prefs(), "a refused POST changes nothing")

	form.Set("csrf", m[1])
	status, page = post(form)
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "The user now opted out of news by telegram.")
	require.Equal(t, notify.Preferences{"digest": {"email": false}, "news": {"telegram": false}}, prefs(), "one preference changed, the other kept")

	// The row's button flips it back.
	form.Set("allowed", "true")
	status, page = post(form)
	require.Equal(t, http.StatusOK, status, page)
	require.Equal(t, notify.Preferences{"digest": {"email": false}, "news": {"telegram": true}}, prefs())
	require.Contains(t, page, `aria-label="Opt out of news by telegram"`)

	for _, tc := range []struct {
		change url.Values
		want   string
	}{
		{url.Values{"category": {"security"}, "allowed": {"false"}}, "is required"},
		{url.Values{"category": {"no good"}}, "is not a category name"},
		{url.Values{"channel": {"pigeon"}}, "is not a channel of this server"},
		{url.Values{"allowed": {"maybe"}}, "Choose whether"},
	} {
		bad := url.Values{"csrf": {m[1]}, "user_id": {user}, "category": {"news"}, "channel": {"email"}, "allowed": {"false"}}
		for k, v := range tc.change {
			bad[k] = v
		}
		status, page = post(bad)
		require.Equal(t, http.StatusUnprocessableEntity, status, tc.want)
		require.Contains(t, page, tc.want)
	}
	require.Equal(t, notify.Preferences{"digest": {"email": false}, "news": {"telegram": true}}, prefs(), "refused changes change nothing")

	// A user with no record still has preferences to show and change.
	status, page = get(recipientLink("u-none"))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="no-recipient"`)
	status, page = get("/ui/recipients?user_id=" + url.QueryEscape("bad\x01id"))
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, page, "user_id")

	for _, secret := range []string{"u-<42>", "u-none", "ada+x@example.com", "Europe/Vienna"} {
		require.NotContains(t, logs.String(), secret)
	}
	require.False(t, strings.Contains(page, "ada+x"), "another user's page shows nothing of this one")
}

// The record lists one address row per channel herald knows with a
// recipient field, as GET /recipients/{user_id} shows them, and one per
// other channel the record holds an address for, by channel name; each
// row is labelled from its field.
func TestAddressRows(t *testing.T) {
	t.Parallel()
	known := notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": {RecipientField: "webhook_url"},
		"telegram": {RecipientField: "telegram_chat_id"}, "internal": {}}
	rec := notify.Recipient{Addresses: map[string]string{"telegram": "-1001", "pigeon": "loft 7", "ärger": "x", "gone": ""}}
	require.Equal(t, []addressRow{
		{Channel: "email", Label: "Email"},
		{Channel: "pigeon", Label: "Pigeon address", Address: "loft 7"},
		{Channel: "telegram", Label: "Telegram chat id", Address: "-1001"},
		{Channel: "webhook", Label: "Webhook URL"},
		{Channel: "ärger", Label: "Ärger address", Address: "x"},
	}, addressRows(known, rec))
	require.Empty(t, addressRows(notify.Channels{"internal": {}}, notify.Recipient{}))
}
