package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

func groupRequest(i int) notify.CreateRequest {
	return notify.CreateRequest{UserID: fmt.Sprintf("u%d", i), Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b"}
}

// Concurrent creates commit in groups, each still all or nothing: a create
// that fails inside a group (the debug fault after its outbox insert, an
// idempotency conflict) leaves no row, and the others of its group commit.
func TestGroupCommitEachCreateAllOrNothing(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	require.NoError(t, s.Migrate(t.Context()))
	_, err := s.Create(t.Context(), notify.NewNotification{Request: groupRequest(0), IdempotencyKey: "taken"})
	require.NoError(t, err)

	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			nn := notify.NewNotification{Request: groupRequest(i + 1)}
			switch i % 10 {
			case 3:
				nn.Fault = notify.FaultAfterOutboxInsert
			case 7:
				nn.IdempotencyKey = "taken" // another request under the user's taken key
				nn.Request.UserID, nn.Request.Body = groupRequest(0).UserID, "another body"
			}
			_, errs[i] = s.Create(context.Background(), nn)
		})
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch i % 10 {
		case 3:
			require.True(t, errors.Is(err, notify.ErrInjectedFault), "%d: %v", i, err)
		case 7:
			require.True(t, errors.Is(err, notify.ErrConflict), "%d: %v", i, err)
		default:
			require.NoError(t, err, "%d", i)
			ok++
		}
	}
	var notifications, outbox int
	require.NoError(t, s.read.QueryRowContext(t.Context(), `SELECT count(*) FROM notifications`).Scan(&notifications))
	require.NoError(t, s.read.QueryRowContext(t.Context(), `SELECT count(*) FROM outbox`).Scan(&outbox))
	require.Equal(t, ok+1, notifications, "the failed creates left no notification")
	require.Equal(t, ok+1, outbox, "and no outbox row")
}

// A create after Close is refused, not hung.
func TestCreateAfterClose(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), t.TempDir()+"/x.db", Config{})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	require.NoError(t, s.Close())
	_, err = s.Create(t.Context(), notify.NewNotification{Request: groupRequest(1)})
	require.ErrorIs(t, err, errClosed)
}
