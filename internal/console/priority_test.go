package console

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// A notification's page shows its priority (issue 34, point 5).
func TestDetailShowsPriority(t *testing.T) {
	t.Parallel()
	srv, st := openConsole(t, "")
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
