package clientcheck_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/client"
)

// A notification's attempts and the destinations come a page at a time
// (AttemptPage, DestinationPage, and their iterators); Attempts and
// Destinations walk every page; Get tells why a pending notification
// waits, and a folded deferral its repeats.
func TestPagesAndWaiting(t *testing.T) {
	t.Parallel()
	h, c := setup(t)
	ctx := t.Context()
	n, err := c.Create(ctx, client.CreateRequest{UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b"})
	require.NoError(t, err)

	db, err := sql.Open("sqlite", h.path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).Format("2006-01-02T15:04:05.000000Z")
	for i := 1; i <= 4; i++ {
		_, err := db.Exec(`INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at, finished_at, outcome, error)
			VALUES (?, 1, ?, ?, ?, 'retry', 'e')`, n.ID, i, now, now)
		require.NoError(t, err)
	}
	_, err = db.Exec(`INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at, finished_at, outcome, error, deferral, repeats, last_at)
		VALUES (?, 1, 5, ?, ?, 'deferred', 'refused', 'down', 53, '2026-05-01T12:32:00.000000Z')`, n.ID, now, now)
	require.NoError(t, err)

	p, err := c.AttemptPage(ctx, n.ID, client.AttemptOptions{Limit: 2})
	require.NoError(t, err)
	require.Len(t, p.Items, 2)
	require.NotEmpty(t, p.NextCursor)
	var nums []int
	for a, err := range c.AllAttempts(ctx, n.ID, client.AttemptOptions{Limit: 2}) {
		require.NoError(t, err)
		nums = append(nums, a.Attempt)
	}
	require.Equal(t, []int{1, 2, 3, 4, 5}, nums)
	all, err := c.Attempts(ctx, n.ID)
	require.NoError(t, err)
	require.Len(t, all, 5)
	last := all[4]
	require.Equal(t, 53, last.Repeats)
	require.NotNil(t, last.LastAt)
	require.Equal(t, time.Date(2026, 5, 1, 12, 32, 0, 0, time.UTC), *last.LastAt)
	require.Zero(t, all[0].Repeats)
	require.Nil(t, all[0].LastAt)

	got, err := c.Get(ctx, n.ID)
	require.NoError(t, err)
	require.Nil(t, got.Waiting)
	since := time.Date(2026, 5, 1, 11, 0, 0, 0, time.UTC)
	for _, k := range []string{"email", "https://a.example.com:443", "https://b.example.com:443"} {
		_, err := h.st.DestinationFailing(ctx, "webhook", k, "refused", since)
		require.NoError(t, err)
	}
	got, err = c.Get(ctx, n.ID)
	require.NoError(t, err)
	require.Equal(t, &client.Waiting{Destination: "email", State: "failing", Reason: "refused", Since: since}, got.Waiting)

	dp, err := c.DestinationPage(ctx, client.DestinationOptions{Limit: 2})
	require.NoError(t, err)
	require.Len(t, dp.Items, 2)
	require.NotEmpty(t, dp.NextCursor)
	dp, err = c.DestinationPage(ctx, client.DestinationOptions{Limit: 2, Cursor: dp.NextCursor})
	require.NoError(t, err)
	require.Len(t, dp.Items, 1)
	require.Empty(t, dp.NextCursor)
	ds, err := c.Destinations(ctx)
	require.NoError(t, err)
	require.Len(t, ds, 3)
	require.Equal(t, "email", ds[0].Key)
	require.EqualValues(t, 1, ds[0].Pending)
	_, err = c.DestinationPage(ctx, client.DestinationOptions{State: "up"})
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "state", apiErr.Field)
}
