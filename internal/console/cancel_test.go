package console

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// A scheduled notification's page shows it scheduled, with its send time,
// and a Cancel button (a POST with the CSRF token) that cancels it; the
// page then shows it canceled, without the button.
func TestCancelButton(t *testing.T) {
	t.Parallel()
	srv, st := openConsole(t, "")
	at := time.Now().Add(time.Hour).UTC()
	created, err := st.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b", SendAt: &at}})
	require.NoError(t, err)
	id := notify.FormatID(created.Notification.ID)

	cl := newClient(t)
	resp, err := cl.Get(srv.URL + "/ui/notifications/" + id)
	require.NoError(t, err)
	page := read(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "status-scheduled")
	require.Contains(t, page, `id="send-at"`)
	require.Contains(t, page, `id="cancel"`)
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(t, m, "the Cancel form carries a CSRF token")

	resp, err = cl.PostForm(srv.URL+"/ui/notifications/"+id+"/cancel", url.Values{})
	require.NoError(t, err)
	read(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	n, err := st.Get(t.Context(), created.Notification.ID)
	require.NoError(t, err)
	require.Equal(t, notify.StatusPending, n.Status, "a refused POST changes nothing")

	resp, err = cl.PostForm(srv.URL+"/ui/notifications/"+id+"/cancel", url.Values{"csrf": {m[1]}})
	require.NoError(t, err)
	page = read(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, "redirected to the notification")
	require.Contains(t, page, "status-canceled")
	require.Contains(t, page, `id="canceled-at"`)
	require.NotContains(t, page, `id="cancel"`)
}
