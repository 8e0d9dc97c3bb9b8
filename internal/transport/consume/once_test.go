package consume

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOnceSettlesOnce(t *testing.T) {
	var o Once
	require.False(t, o.Settled())
	require.NoError(t, o.Settle("ack", "42", func() error { return nil }))
	require.True(t, o.Settled())

	ran := false
	err := o.Settle("retry", "42", func() error { ran = true; return nil })
	require.False(t, ran, "a second settlement must not run")
	require.ErrorIs(t, err, ErrSettled)
	require.EqualError(t, err, "retry message 42: already settled")
}

func TestOnceFailedSettlementLeavesItUnsettled(t *testing.T) {
	var o Once
	boom := errors.New("copy not confirmed")
	err := o.Settle("retry", "7", func() error { return boom })
	require.ErrorIs(t, err, boom)
	require.EqualError(t, err, "retry message 7: copy not confirmed")
	require.False(t, o.Settled())

	// The caller falls back to another settlement, which takes.
	require.NoError(t, o.Settle("release", "7", func() error { return nil }))
	require.True(t, o.Settled())
}

func TestOnceDoCountsWhatOpReports(t *testing.T) {
	var o Once
	partial := errors.New("copy stored, original not deleted")
	err := o.Do(func() (bool, error) { return true, partial })
	require.ErrorIs(t, err, partial, "op's error is returned as is")
	require.True(t, o.Settled(), "op said the settlement took despite its error")
	require.ErrorIs(t, o.Do(func() (bool, error) { return true, nil }), ErrSettled)

	var u Once
	require.NoError(t, u.Do(func() (bool, error) { return false, nil }))
	require.False(t, u.Settled(), "op said it did not settle")
}

func TestOnceClose(t *testing.T) {
	gone := errors.New("its handler returned without settling it")

	var o Once
	require.True(t, o.Close(gone), "closed while unsettled")
	require.True(t, o.Settled())
	ran := false
	err := o.Settle("ack", "3", func() error { ran = true; return nil })
	require.False(t, ran)
	require.EqualError(t, err, "ack message 3: its handler returned without settling it")
	require.False(t, o.Close(errors.New("again")), "a second close finds it closed")
	require.ErrorIs(t, o.Do(func() (bool, error) { return true, nil }), gone, "the first reason stays")

	var s Once
	require.NoError(t, s.Settle("ack", "4", func() error { return nil }))
	require.False(t, s.Close(gone), "closed after a settlement")
	require.ErrorIs(t, s.Settle("ack", "4", func() error { return nil }), gone,
		"after the close its reason wins over already settled")

	var n Once
	require.True(t, n.Close(nil))
	require.ErrorIs(t, n.Settle("ack", "5", func() error { return nil }), ErrSettled)
}

func TestOnceSerialisesConcurrentSettlements(t *testing.T) {
	var o Once
	var runs, inside atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_ = o.Settle("ack", "1", func() error {
				if inside.Add(1) != 1 {
					t.Error("two settlements ran at once")
				}
				defer inside.Add(-1)
				runs.Add(1)
				return nil
			})
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), runs.Load())
}
