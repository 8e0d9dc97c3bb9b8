package console

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// A notification's page shows its priority (issue 34, point 5).
func TestDetailShowsPriority(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	c, err := New(st, st, deadletter.New(st, nil), Config{SessionTTL: time.Hour, RefreshEvery: time.Second})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	cl := newClient(t)
	for _, p := range []notify.Priority{notify.PriorityHigh, notify.PriorityBulk, ""} {
		created, err := st.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
			UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b", Priority: p}})
		require.NoError(t, err)
		resp, err := cl.Get(srv.URL + "/ui/notifications/" + notify.FormatID(created.Notification.ID))
		require.NoError(t, err)
		page := read(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `<dd id="priority">`+string(p.OrDefault())+`</dd>`)
	}
}
