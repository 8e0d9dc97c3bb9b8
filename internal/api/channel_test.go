package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
)

// hookSpec stands in for the webhook package's validator: an https URL.
var hookSpec = notify.ChannelSpec{JSONBody: true, To: "an https URL", RecipientField: "webhook_url", Validate: func(r notify.CreateRequest) error {
	if !strings.HasPrefix(r.To, "https://") {
		return &notify.FieldError{Field: "to", Message: "must be an https URL"}
	}
	return notify.CheckBody(r.Body)
}}

func channelsEnv(t *testing.T) *env {
	t.Helper()
	return setup(t, api.Config{Channels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": hookSpec}})
}

// Issue 17: requests are validated per channel. A webhook body may be any
// JSON value (held as its compact JSON text) or a string; email keeps a
// string body and its own checks; an unknown channel is a 400 naming
// channel and listing the known ones. Nothing is written on a 400.
func TestCreatePerChannel(t *testing.T) {
	t.Parallel()
	e := channelsEnv(t)
	post := func(b string) reply {
		return do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), b)
	}

	r := post(`{"user_id":"u","channel":"webhook","to":"https://example.com/hook","body":{ "event" : "paid", "n": [1, 2.5, null] }}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "webhook", r.json["channel"])
	require.Equal(t, "", r.json["subject"])
	got := do(t, http.MethodGet, e.url+r.header.Get("Location"), nil, "")
	require.Equal(t, `{"event":"paid","n":[1,2.5,null]}`, got.json["body"], "the compact JSON text")

	r = post(`{"user_id":"u","channel":"webhook","to":"https://example.com/hook","body":"plain text"}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	got = do(t, http.MethodGet, e.url+r.header.Get("Location"), nil, "")
	require.Equal(t, "plain text", got.json["body"])

	n, o := e.rows(t)
	require.Equal(t, 2, n)
	require.Equal(t, 2, o)
	for _, tc := range []struct {
		body, field, message string
	}{
		{`{"user_id":"u","channel":"email","to":"a@example.com","subject":"s","body":{"a":1}}`, "body", "body must be a string"},
		{`{"user_id":"u","channel":"email","to":"https://example.com/hook","subject":"s","body":"b"}`, "to", "to must be a single email address"},
		{`{"user_id":"u","channel":"webhook","to":"a@example.com","body":"b"}`, "to", "to must be an https URL"},
		{`{"user_id":"u","channel":"webhook","to":"https://example.com/hook","body":null}`, "body", "body is required"},
		{`{"user_id":"u","channel":"sms","to":"+3312345678","body":"b"}`, "channel", `channel must be one of "email", "webhook"`},
		{`{"user_id":"u","channel":"Email","to":"a@example.com","subject":"s","body":"b"}`, "channel", `channel must be one of "email", "webhook"`},
	} {
		r := post(tc.body)
		requireError(t, r, http.StatusBadRequest, "invalid_field", tc.field)
		require.Equal(t, tc.message, r.errString("message"), tc.body)
	}
	n, o = e.rows(t)
	require.Equal(t, 2, n, "nothing written on a 400")
	require.Equal(t, 2, o)

	// An email-only API refuses webhook as an unknown channel.
	only := setup(t, api.Config{})
	r = do(t, http.MethodPost, only.url+"/notifications", jsonHeaders(), `{"user_id":"u","channel":"webhook","to":"https://example.com/hook","body":"b"}`)
	requireError(t, r, http.StatusBadRequest, "invalid_field", "channel")
	require.Equal(t, `channel must be "email"`, r.errString("message"))
}

// A create on a channel herald knows but this server has not enabled
// names what enables it (issue 38): the enabled list alone leaves the
// user guessing. Nothing is written.
func TestCreateOnDisabledChannelNamesTheSetting(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{DisabledChannels: map[string]string{"webhook": "set HERALD_WEBHOOK_SECRET to enable it"}})
	r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), `{"user_id":"u","channel":"webhook","to":"https://example.com/hook","body":{"a":1}}`)
	requireError(t, r, http.StatusBadRequest, "invalid_field", "channel")
	require.Equal(t, `channel "webhook" is not enabled on this server: set HERALD_WEBHOOK_SECRET to enable it (enabled: "email")`, r.errString("message"))
	// A channel herald does not know still lists the enabled ones.
	r = do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), `{"user_id":"u","channel":"sms","to":"+3312345678","body":"b"}`)
	requireError(t, r, http.StatusBadRequest, "invalid_field", "channel")
	require.Equal(t, `channel must be "email"`, r.errString("message"))
	n, o := e.rows(t)
	require.Zero(t, n)
	require.Zero(t, o)
}

// GET /notifications?channel= lists one channel, a known one.
func TestListByChannel(t *testing.T) {
	t.Parallel()
	e := channelsEnv(t)
	for _, b := range []string{
		`{"user_id":"u","channel":"webhook","to":"https://example.com/1","body":{"a":1}}`,
		body(t, nil),
		`{"user_id":"u","channel":"webhook","to":"https://example.com/2","body":"x"}`,
	} {
		r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), b)
		require.Equal(t, http.StatusCreated, r.status, r.raw)
	}
	list := func(q string) reply { return do(t, http.MethodGet, e.url+"/notifications?"+q, nil, "") }
	tos := func(r reply) []string {
		var out []string
		for _, it := range r.json["items"].([]any) {
			out = append(out, it.(map[string]any)["to"].(string))
		}
		return out
	}
	r := list("channel=webhook")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, []string{"https://example.com/2", "https://example.com/1"}, tos(r))
	r = list("channel=email")
	require.Equal(t, []string{"Ada <ada@example.com>"}, tos(r))

	// A cursor belongs to its channel filter.
	r = list("channel=webhook&limit=1")
	next := r.json["next_cursor"].(string)
	r = list("channel=webhook&limit=1&cursor=" + url.QueryEscape(next))
	require.Equal(t, []string{"https://example.com/1"}, tos(r))
	r = list("channel=email&limit=1&cursor=" + url.QueryEscape(next))
	requireError(t, r, http.StatusBadRequest, "invalid_cursor", "cursor")

	for _, q := range []string{"channel=sms", "channel=", "channel=email&channel=webhook"} {
		requireError(t, list(q), http.StatusBadRequest, "invalid_field", "channel")
	}
}
