package deadletter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/deadletter"
	"github.com/heraldhq/herald/internal/notify"
)

// Pure logic of the service: the stores' DeadLetters and Redrive are proven
// by the store conformance suite, the whole flow by cmd/herald's tests.

type fakeStore struct {
	failed    []int64
	redriven  []int64
	stillDead map[int64]bool // false: sent meanwhile, Redrive reports false
}

func (s *fakeStore) DeadLetters(context.Context, notify.DeadLetterFilter) ([]notify.Notification, error) {
	var out []notify.Notification
	for _, id := range s.failed {
		out = append(out, notify.Notification{ID: id, Status: notify.StatusFailed})
	}
	return out, nil
}

func (s *fakeStore) Redrive(_ context.Context, id int64) (bool, error) {
	if !s.stillDead[id] {
		return false, nil
	}
	s.redriven = append(s.redriven, id)
	return true, nil
}

type fakeQueue struct {
	removed []int64
	err     error
}

func (q *fakeQueue) Remove(_ context.Context, ids []int64) (int, error) {
	q.removed = append(q.removed, ids...)
	return len(ids), q.err
}

func TestRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newStore := func() *fakeStore {
		return &fakeStore{failed: []int64{3, 2, 1}, stillDead: map[int64]bool{3: true, 1: true}}
	}

	_, err := deadletter.New(newStore(), nil).Redrive(ctx, notify.RedriveSelection{})
	require.ErrorIs(t, err, deadletter.ErrNoSelection, "redriving everything must be asked for")

	st := newStore()
	res, err := deadletter.New(st, nil).Redrive(ctx, notify.RedriveSelection{All: true, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []int64{3, 2, 1}, res.Redriven)
	require.Empty(t, st.redriven, "a dry run changes nothing")

	st, q := newStore(), &fakeQueue{}
	var progress []int
	res, err = deadletter.New(st, q).Redrive(ctx, notify.RedriveSelection{All: true, Progress: func(done, total int) {
		require.Equal(t, 3, total)
		progress = append(progress, done)
	}})
	require.NoError(t, err)
	require.Equal(t, 3, res.Selected)
	require.Equal(t, []int64{3, 1}, res.Redriven)
	require.Equal(t, []int64{2}, res.Skipped, "no longer failed: skipped, never sent again")
	require.Equal(t, []int64{3, 1}, q.removed, "only the redriven leave the dead-letter queue")
	require.Equal(t, 2, res.RemovedFromQueue)
	require.Equal(t, []int{1, 2, 3}, progress)

	q = &fakeQueue{err: errors.New("broker down")}
	res, err = deadletter.New(newStore(), q).Redrive(ctx, notify.RedriveSelection{Filter: notify.DeadLetterFilter{Limit: 10}})
	require.Error(t, err, "a failed removal is reported")
	require.Equal(t, []int64{3, 1}, res.Redriven, "the redrive itself stands")
}
