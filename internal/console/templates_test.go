package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// The Templates page lists the templates and previews one, escaping the
// data's markup: the HTML part is shown as its source, never rendered.
func TestTemplatesPage(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	c, err := New(st, st, deadletter.New(st, nil), withFilters(Config{SessionTTL: time.Hour, RefreshEvery: time.Second, Templates: st}))
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, page := get("/ui/templates")
	require.Equal(t, 200, status)
	require.Contains(t, page, "No template yet")

	for _, v := range []notify.TemplateVersion{
		{Name: "welcome", Channel: "email", Subject: "Hi {{.name}}", Text: "Hello {{.name}}", HTML: "<p>{{.name}}</p>"},
		{Name: "welcome", Channel: "email", Locale: "de", Subject: "Hallo {{.name}}", Text: "Hallo {{.name}}"},
	} {
		_, err := st.PutTemplate(t.Context(), v)
		require.NoError(t, err)
	}
	status, page = get("/ui/templates")
	require.Equal(t, 200, status)
	require.Contains(t, page, "welcome")
	require.Contains(t, page, "email de v2")
	require.Contains(t, page, "email (default) v1")

	q := url.Values{"name": {"welcome"}, "locale": {"de-AT"}, "data": {`{"name":"Ada"}`}}
	status, page = get("/ui/templates?" + q.Encode())
	require.Equal(t, 200, status)
	require.Contains(t, page, `<h3 id="preview-subject">Hallo Ada</h3>`)

	q = url.Values{"name": {"welcome"}, "data": {`{"name":"<script>x</script>"}`}}
	status, page = get("/ui/templates?" + q.Encode())
	require.Equal(t, 200, status)
	require.NotContains(t, page, "<script>x</script>")
	require.Contains(t, page, `<pre id="preview-html">&lt;p&gt;&amp;lt;script&amp;gt;x&amp;lt;/script&amp;gt;&lt;/p&gt;</pre>`)

	q = url.Values{"name": {"welcome"}, "data": {`{}`}}
	status, page = get("/ui/templates?" + q.Encode())
	require.Equal(t, 422, status)
	require.Contains(t, page, "variable .name is missing from data")
}
