package batch_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/batch"
)

func TestFirstClaims(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		reqs  []notify.ClaimRequest // MessageID, NotificationID
		first []int
	}{
		{"none", nil, nil},
		{"distinct", []notify.ClaimRequest{{MessageID: 1, NotificationID: 10}, {MessageID: 2, NotificationID: 20}}, []int{0, 1}},
		{"same message", []notify.ClaimRequest{{MessageID: 1, NotificationID: 10}, {MessageID: 1, NotificationID: 10}}, []int{0}},
		{"same notification, another message", []notify.ClaimRequest{{MessageID: 1, NotificationID: 10}, {MessageID: 2, NotificationID: 10}, {MessageID: 3, NotificationID: 30}}, []int{0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := make([]notify.Claim, len(tc.reqs))
			require.Equal(t, tc.first, batch.FirstClaims(tc.reqs, out))
			for i, r := range tc.reqs {
				require.Equal(t, notify.Claim{MessageID: r.MessageID, NotificationID: r.NotificationID, Status: notify.ClaimBusy, RetryCount: r.RetryCount}, out[i])
			}
		})
	}
}

func TestPutCreated(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		c       notify.Created
		err     error
		want    notify.BatchResult
		written bool
		wantErr error
	}{
		{"written", notify.Created{Notification: notify.Notification{ID: 7}}, nil, notify.BatchResult{Created: notify.Created{Notification: notify.Notification{ID: 7}}}, true, nil},
		{"replayed", notify.Created{Notification: notify.Notification{ID: 7}, Replayed: true}, nil, notify.BatchResult{Created: notify.Created{Notification: notify.Notification{ID: 7}, Replayed: true}}, false, nil},
		{"conflict", notify.Created{}, notify.ErrConflict, notify.BatchResult{Err: notify.ErrConflict}, false, nil},
		{"failure", notify.Created{}, boom, notify.BatchResult{}, false, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r notify.BatchResult
			written, err := batch.PutCreated(&r, tc.c, tc.err)
			require.ErrorIs(t, err, tc.wantErr)
			if tc.wantErr == nil {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, r)
			require.Equal(t, tc.written, written)
		})
	}
}
