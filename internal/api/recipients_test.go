package api_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"net/http/httptest"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// setupResolving serves an API whose store also keeps the recipients and
// templates, with the email channel and the webhook channel's own
// validation (its SSRF guard).
func setupResolving(t *testing.T) *env {
	t.Helper()
	hook := notify.ChannelSpec{JSONBody: true, To: "an http(s) URL", Validate: webhook.Validate, RecipientField: "webhook_url"}
	return setupRecipients(t, api.Config{Channels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": hook}})
}

// setupRecipients serves an API under cfg whose store also keeps the
// recipients and templates.
func setupRecipients(t *testing.T, cfg api.Config) *env {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	st, err := sqlite.Open(ctx, path, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(ctx))
	cfg.Recipients, cfg.Templates = st, st
	a, err := api.New(st, cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(ON)&_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return &env{url: srv.URL, handler: a.Handler(), store: st, db: db, path: path}
}

func TestRecipientPutChecksEachField(t *testing.T) {
	t.Parallel()
	e := setupResolving(t)
	for _, tc := range []struct{ body, field string }{
		{`{"email":"not an address"}`, "email"},
		{`{"webhook_url":"http://127.0.0.1/hook"}`, "webhook_url"},
		{`{"webhook_url":"ftp://example.com/x"}`, "webhook_url"},
		{`{"time_zone":"Mars/Olympus"}`, "time_zone"},
		{`{"time_zone":"Local"}`, "time_zone"},
		{`{"locale":"not a tag"}`, "locale"},
		{`{"mail":"a@example.com"}`, "mail"},
		{`{"email":1}`, "email"},
	} {
		r := do(t, "PUT", e.url+"/recipients/u-1", jsonHeaders(), tc.body)
		require.Equal(t, 400, r.status, tc.body)
		require.Equal(t, tc.field, r.errField(), tc.body)
	}
	r := do(t, "GET", e.url+"/recipients/u-1", nil, "")
	require.Equal(t, 404, r.status, "nothing was stored")
}

func TestRecipientResolvesCreates(t *testing.T) {
	t.Parallel()
	e := setupResolving(t)
	r := do(t, "PUT", e.url+"/recipients/u-1", jsonHeaders(), `{"email":"Ada <ada@example.com>","locale":"de","time_zone":"Europe/Berlin"}`)
	require.Equal(t, 200, r.status, r.raw)
	require.EqualValues(t, 1, r.json["revision"])
	got := do(t, "GET", e.url+"/recipients/u-1", nil, "")
	require.Equal(t, 200, got.status)
	require.Equal(t, "Ada <ada@example.com>", got.json["email"])
	require.Equal(t, "Europe/Berlin", got.json["time_zone"])

	// A create without to takes the recipient's address, and keeps it.
	c := do(t, "POST", e.url+"/notifications", jsonHeaders(), `{"user_id":"u-1","channel":"email","subject":"s","body":"b"}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "Ada <ada@example.com>", c.json["to"])
	r = do(t, "PUT", e.url+"/recipients/u-1", jsonHeaders(), `{"email":"ada@example.org"}`)
	require.Equal(t, 200, r.status)
	require.EqualValues(t, 2, r.json["revision"])
	n := do(t, "GET", e.url+"/notifications/"+c.json["id"].(string), nil, "")
	require.Equal(t, "Ada <ada@example.com>", n.json["to"], "a later change never alters what was accepted")

	// No address for the channel, no recipient: 422 naming it.
	r = do(t, "POST", e.url+"/notifications", jsonHeaders(), `{"user_id":"u-1","channel":"webhook","body":{}}`)
	require.Equal(t, 422, r.status, r.raw)
	require.Equal(t, "to", r.errField())
	require.Contains(t, r.errString("message"), "webhook_url")
	r = do(t, "POST", e.url+"/notifications", jsonHeaders(), `{"user_id":"nobody","channel":"email","subject":"s","body":"b"}`)
	require.Equal(t, 422, r.status, r.raw)
	require.Equal(t, "user_id", r.errField())
	require.Contains(t, r.errString("message"), `"nobody"`)

	// DELETE erases the record; creates without to then fail.
	require.Equal(t, 204, do(t, "DELETE", e.url+"/recipients/u-1", nil, "").status)
	require.Equal(t, 404, do(t, "GET", e.url+"/recipients/u-1", nil, "").status)
	require.Equal(t, 404, do(t, "DELETE", e.url+"/recipients/u-1", nil, "").status)
	r = do(t, "POST", e.url+"/notifications", jsonHeaders(), `{"user_id":"u-1","channel":"email","subject":"s","body":"b"}`)
	require.Equal(t, 422, r.status)
	notifications, outbox := e.rows(t)
	require.Equal(t, 1, notifications)
	require.Equal(t, 1, outbox)
}

// Quiet hours given without a time_zone are read in the recipient's zone;
// with neither, the create is refused.
func TestRecipientTimeZoneForQuietHours(t *testing.T) {
	t.Parallel()
	e := setupResolving(t)
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/u-1", jsonHeaders(), `{"email":"a@example.com","time_zone":"Asia/Tokyo"}`).status)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	if now := time.Now().In(tokyo); now.Hour() == 23 && now.Minute() == 59 {
		t.Skip("the window is open one minute a day, and this is it")
	}
	quiet := `"quiet_hours":{"start":"00:00","end":"23:59"}`
	r := do(t, "POST", e.url+"/notifications", jsonHeaders(), `{"user_id":"u-1","channel":"email","subject":"s","body":"b",`+quiet+`}`)
	require.Equal(t, 201, r.status, r.raw)
	sendAt, err := time.Parse(time.RFC3339Nano, r.json["send_at"].(string))
	require.NoError(t, err)
	local := sendAt.In(tokyo)
	require.Equal(t, 23, local.Hour(), "the end of the window on Tokyo's clock: %s", sendAt)
	require.Equal(t, 59, local.Minute())

	r = do(t, "POST", e.url+"/notifications", jsonHeaders(), `{"user_id":"u-2","channel":"email","to":"b@example.com","subject":"s","body":"b",`+quiet+`}`)
	require.Equal(t, 400, r.status, r.raw)
	require.Equal(t, "time_zone", r.errField())
}

func putTemplate(t *testing.T, e *env, name, body string) reply {
	t.Helper()
	return do(t, "PUT", e.url+"/templates/"+name, jsonHeaders(), body)
}

func TestTemplatedCreates(t *testing.T) {
	t.Parallel()
	e := setupResolving(t)
	ctx := context.Background()
	r := putTemplate(t, e, "order_shipped", `{"channel":"email","subject":"Order {{.order}} shipped","text":"Hi {{.name}},\nyour order {{.order}} is on its way.","html":"<p>Hi {{.name}}, order <b>{{.order}}</b></p>"}`)
	require.Equal(t, 201, r.status, r.raw)
	require.EqualValues(t, 1, r.json["version"])
	require.Equal(t, "/templates/order_shipped?version=1", r.header.Get("Location"))
	r = putTemplate(t, e, "order_shipped", `{"channel":"email","locale":"de","subject":"Bestellung {{.order}} verschickt","text":"Hallo {{.name}}"}`)
	require.EqualValues(t, 2, r.json["version"])
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/u-de", jsonHeaders(), `{"email":"de@example.com","locale":"de-AT"}`).status)
	require.Equal(t, 200, do(t, "PUT", e.url+"/recipients/u-fr", jsonHeaders(), `{"email":"fr@example.com","locale":"fr"}`).status)

	create := func(body string) reply {
		t.Helper()
		return do(t, "POST", e.url+"/notifications", jsonHeaders(), body)
	}
	// The default variant, with markup in the data: escaped in the HTML
	// part only.
	c := create(`{"user_id":"u-fr","channel":"email","template":"order_shipped","data":{"name":"<script>alert(1)</script>","order":1234.50}}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "Order 1234.50 shipped", c.json["subject"], "numbers print as written")
	id, _ := notify.ParseID(c.json["id"].(string))
	n, err := e.store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "fr@example.com", n.To)
	require.Equal(t, "Hi <script>alert(1)</script>,\nyour order 1234.50 is on its way.", n.Body)
	require.Equal(t, "<p>Hi &lt;script&gt;alert(1)&lt;/script&gt;, order <b>1234.50</b></p>", n.HTML)
	require.Equal(t, "order_shipped", n.Template)
	require.Equal(t, 1, n.TemplateVersion)
	require.Equal(t, "", n.Locale)

	// de-AT falls back to de.
	c = create(`{"user_id":"u-de","channel":"email","template":"order_shipped","data":{"name":"Jörg","order":7}}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "Bestellung 7 verschickt", c.json["subject"])
	id, _ = notify.ParseID(c.json["id"].(string))
	n, err = e.store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "Hallo Jörg", n.Body)
	require.Empty(t, n.HTML)
	require.Equal(t, "de", n.Locale)

	// A pinned version renders the template as it stood then.
	require.Equal(t, 201, putTemplate(t, e, "order_shipped", `{"channel":"email","subject":"v3 {{.order}}","text":"v3"}`).status)
	c = create(`{"user_id":"u-fr","channel":"email","template":"order_shipped","template_version":2,"data":{"name":"A","order":1}}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "Order 1 shipped", c.json["subject"])
	c = create(`{"user_id":"u-fr","channel":"email","template":"order_shipped","data":{"name":"A","order":1}}`)
	require.Equal(t, "v3 1", c.json["subject"])

	before, _ := e.rows(t)
	for _, tc := range []struct {
		body, field, msg string
		status           int
	}{
		{`{"user_id":"u-fr","channel":"email","template":"order_shipped","template_version":2,"data":{"name":"A"}}`, "data.order", "subject line 1: variable .order is missing from data", 422},
		{`{"user_id":"u-fr","channel":"email","template":"nope","data":{}}`, "template", `unknown template "nope"`, 422},
		{`{"user_id":"u-fr","channel":"email","template":"order_shipped","template_version":9,"data":{}}`, "template_version", "no version 9", 422},
		{`{"user_id":"u-fr","channel":"webhook","to":"https://example.com/h","template":"order_shipped","data":{}}`, "template", "no webhook variant", 422},
		{`{"user_id":"u-fr","channel":"email","template":"order_shipped","subject":"s","data":{}}`, "subject", "must be absent with template", 400},
		{`{"user_id":"u-fr","channel":"email","template":"order_shipped","data":[1]}`, "data", "JSON object", 400},
		{`{"user_id":"u-fr","channel":"email","subject":"s","body":"b","data":{}}`, "data", "needs template", 400},
		{`{"user_id":"u-fr","channel":"email","template":"../x","data":{}}`, "template", "letters", 400},
	} {
		r := create(tc.body)
		require.Equal(t, tc.status, r.status, "%s: %s", tc.body, r.raw)
		require.Equal(t, tc.field, r.errField(), tc.body)
		require.Contains(t, r.errString("message"), tc.msg, tc.body)
	}
	// A locale with no variant and no default variant: 422 naming it.
	require.Equal(t, 201, putTemplate(t, e, "only_en", `{"channel":"email","locale":"en","subject":"s","text":"t"}`).status)
	r = create(`{"user_id":"u-fr","channel":"email","template":"only_en","data":{}}`)
	require.Equal(t, 422, r.status, r.raw)
	require.Contains(t, r.errString("message"), `locale "fr"`)
	// A missing variable on a later line names it.
	require.Equal(t, 201, putTemplate(t, e, "lines", `{"channel":"email","subject":"s","text":"one\ntwo {{.a.b}}"}`).status)
	r = create(`{"user_id":"u-fr","channel":"email","template":"lines","data":{"a":{}}}`)
	require.Equal(t, 422, r.status, r.raw)
	require.Equal(t, "data.a.b", r.errField())
	require.Contains(t, r.errString("message"), "text line 2")
	after, _ := e.rows(t)
	require.Equal(t, before, after, "no failed create wrote anything")

	// In a batch, a template is refused (for now) item by item.
	b := do(t, "POST", e.url+"/notifications/batch", jsonHeaders(), `{"notifications":[{"user_id":"u-fr","channel":"email","template":"lines","data":{}}]}`)
	require.Equal(t, 207, b.status, b.raw)
	require.Contains(t, b.raw, `"status":422`)
}

func TestTemplatePutAndPreview(t *testing.T) {
	t.Parallel()
	e := setupResolving(t)
	for _, tc := range []struct {
		body, field string
		status      int
	}{
		{`{"channel":"email","subject":"s","text":"one\n{{.name"}`, "text", 422},
		{`{"channel":"email","subject":"s","text":"t","html":"<p>{{if}}</p>"}`, "html", 422},
		{`{"channel":"email","text":"t"}`, "subject", 400},
		{`{"channel":"webhook","subject":"s","text":"{}"}`, "subject", 400},
		{`{"channel":"webhook","text":"{}","html":"<p/>"}`, "html", 400},
		{`{"channel":"sms","text":"t"}`, "channel", 400},
		{`{"channel":"email","locale":"x y","subject":"s","text":"t"}`, "locale", 400},
		{`{"channel":"email","subject":"s","text":""}`, "text", 400},
	} {
		r := putTemplate(t, e, "t1", tc.body)
		require.Equal(t, tc.status, r.status, "%s: %s", tc.body, r.raw)
		require.Equal(t, tc.field, r.errField(), tc.body)
	}
	r := putTemplate(t, e, "t1", `{"channel":"email","subject":"s","text":"one\n{{.name"}`)
	require.Contains(t, r.errString("message"), "line 2")
	require.Equal(t, 404, do(t, "GET", e.url+"/templates/t1", nil, "").status, "nothing was stored")
	require.Equal(t, 400, putTemplate(t, e, url.PathEscape("bad name"), `{"channel":"email","subject":"s","text":"t"}`).status)

	require.Equal(t, 201, putTemplate(t, e, "t1", `{"channel":"email","subject":"Hi {{.name}}","text":"Hello {{.name}}","html":"<a href=\"/u/{{.name}}\">{{.name}}</a>"}`).status)
	require.Equal(t, 201, putTemplate(t, e, "t1", `{"channel":"email","locale":"de","subject":"Hallo {{.name}}","text":"Hallo"}`).status)
	g := do(t, "GET", e.url+"/templates/t1", nil, "")
	require.Equal(t, 200, g.status)
	require.EqualValues(t, 2, g.json["latest_version"])
	require.Len(t, g.json["variants"], 2)
	g = do(t, "GET", e.url+"/templates/t1?version=1", nil, "")
	require.Len(t, g.json["variants"], 1)
	require.Equal(t, 404, do(t, "GET", e.url+"/templates/t1?version=3", nil, "").status)
	l := do(t, "GET", e.url+"/templates", nil, "")
	require.Equal(t, 200, l.status)
	require.Len(t, l.json["items"], 1)

	before, _ := e.rows(t)
	p := do(t, "POST", e.url+"/templates/t1/preview", jsonHeaders(), `{"locale":"de-CH","data":{"name":"Ada"}}`)
	require.Equal(t, 200, p.status, p.raw)
	require.Equal(t, "Hallo Ada", p.json["subject"])
	require.Equal(t, "de", p.json["locale"])
	p = do(t, "POST", e.url+"/templates/t1/preview", jsonHeaders(), `{"data":{"name":"\"><script>x</script>"}}`)
	require.Equal(t, 200, p.status, p.raw)
	require.Equal(t, `Hello "><script>x</script>`, p.json["text"])
	html := p.json["html"].(string)
	require.NotContains(t, html, "<script>")
	require.True(t, strings.HasPrefix(html, `<a href="/u/%22%3e%3cscript%3ex%3c/script%3e">`), html)
	p = do(t, "POST", e.url+"/templates/t1/preview", jsonHeaders(), `{"data":{}}`)
	require.Equal(t, 422, p.status)
	require.Equal(t, "data.name", p.errField())
	p = do(t, "POST", e.url+"/templates/nope/preview", jsonHeaders(), `{}`)
	require.Equal(t, 422, p.status)
	require.Equal(t, "template", p.errField())
	after, _ := e.rows(t)
	require.Equal(t, before, after, "a preview sends nothing")
}

// A recipient's address fields are those of the channels herald knows
// (notify.ChannelSpec.RecipientField), enabled or not, in channel name
// order between user_id and locale: a channel the API has never heard of
// before (pigeon) is taken, shown and resolved with no change of the API
// or the store, and GET shows every known channel's field.
func TestRecipientFieldsFollowTheChannels(t *testing.T) {
	t.Parallel()
	pigeon := notify.ChannelSpec{To: "a loft", RecipientField: "pigeon_loft", Validate: func(r notify.CreateRequest) error {
		if !strings.HasPrefix(r.To, "loft ") {
			return &notify.FieldError{Field: "to", Message: "must be a loft"}
		}
		return notify.CheckBody(r.Body)
	}}
	e := setupRecipients(t, api.Config{
		Channels:      notify.Channels{notify.ChannelEmail: notify.EmailSpec, "pigeon": pigeon},
		KnownChannels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "pigeon": pigeon, "webhook": hookSpec},
	})
	r := do(t, "PUT", e.url+"/recipients/u-1", jsonHeaders(), `{"pigeon_loft":"loft <7> & co","email":null,"locale":"de"}`)
	require.Equal(t, 200, r.status, r.raw)
	at, _ := json.Marshal(r.json["updated_at"])
	require.Equal(t, `{"user_id":"u-1","email":"","pigeon_loft":"loft <7> & co","webhook_url":"","locale":"de","time_zone":"","revision":1,"updated_at":`+string(at)+`}`,
		strings.TrimSpace(r.raw), "every known channel's field, in channel name order, between user_id and locale; no HTML escaping, as every reply")
	got := do(t, "GET", e.url+"/recipients/u-1", nil, "")
	require.Equal(t, r.raw, got.raw)
	rec, err := e.store.Recipient(t.Context(), "u-1")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"pigeon": "loft <7> & co"}, rec.Addresses)

	c := do(t, "POST", e.url+"/notifications", jsonHeaders(), `{"user_id":"u-1","channel":"pigeon","body":"coo"}`)
	require.Equal(t, 201, c.status, c.raw)
	require.Equal(t, "loft <7> & co", c.json["to"])
	c = do(t, "POST", e.url+"/notifications", jsonHeaders(), `{"user_id":"u-1","channel":"email","subject":"s","body":"b"}`)
	require.Equal(t, 422, c.status, c.raw)
	require.Contains(t, c.errString("message"), `recipient "u-1" has no email`)

	for _, tc := range []struct{ body, field string }{
		{`{"pigeon_loft":"nest 3"}`, "pigeon_loft"},
		{`{"pigeon_loft":7}`, "pigeon_loft"},
		{`{"webhook_url":"ftp://example.com/x"}`, "webhook_url"},
		{`{"telegram_chat_id":"-1001"}`, "telegram_chat_id"},
		{`{"pigeon":"loft 7"}`, "pigeon"},
		{`{"locale":["de"]}`, "locale"},
	} {
		r := do(t, "PUT", e.url+"/recipients/u-1", jsonHeaders(), tc.body)
		require.Equal(t, 400, r.status, tc.body)
		require.Equal(t, tc.field, r.errField(), tc.body)
	}
	require.Equal(t, `pigeon_loft must be a string`, do(t, "PUT", e.url+"/recipients/u-1", jsonHeaders(), `{"pigeon_loft":7}`).errString("message"))
}

// Two channels with one recipient field, or a channel whose field is one
// every recipient has, cannot be shown in one recipient: New refuses them.
func TestRecipientFieldsMustBeDistinct(t *testing.T) {
	t.Parallel()
	st := setup(t, api.Config{}).store
	for _, tc := range []struct {
		known notify.Channels
		msg   string
	}{
		{notify.Channels{notify.ChannelEmail: notify.EmailSpec, "mail2": {RecipientField: "email"}}, `channels "email" and "mail2": both have recipient field "email"`},
		{notify.Channels{"sms": {RecipientField: "locale"}}, `channel "sms": recipient field "locale" is a field of every recipient`},
	} {
		_, err := api.New(st, api.Config{KnownChannels: tc.known})
		require.Error(t, err)
		require.Contains(t, err.Error(), tc.msg)
	}
	_, err := api.New(st, api.Config{KnownChannels: notify.Channels{notify.ChannelEmail: notify.EmailSpec, "internal": {}}})
	require.NoError(t, err, "a channel without a recipient field")
}
