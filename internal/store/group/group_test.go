package group

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNextTakesWhatWaitsUpToMax(t *testing.T) {
	ch := make(chan int, 10)
	closing := make(chan struct{})
	for i := range 5 {
		ch <- i
	}
	g, ok := Next(ch, closing, 3, nil)
	require.True(t, ok)
	assert.Equal(t, []int{0, 1, 2}, g)
	g, ok = Next(ch, closing, 3, g)
	require.True(t, ok)
	assert.Equal(t, []int{3, 4}, g, "what waits, without waiting for more")
}

func TestNextStopsWhenClosing(t *testing.T) {
	closing := make(chan struct{})
	close(closing)
	g, ok := Next(make(chan int), closing, 3, []int{7})
	assert.False(t, ok)
	assert.Empty(t, g)
}

func TestHandAnswersOnceTakenEvenAfterContextEnds(t *testing.T) {
	ch := make(chan Request[int, string])
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		r := <-ch
		cancel() // the caller's context ends while its request is in a group
		r.Answer("committed "+strconv.Itoa(r.In), nil)
	}()
	out, err := Hand(ctx, ch, nil, errors.New("closed"), 7)
	require.NoError(t, err)
	assert.Equal(t, "committed 7", out)
}

func TestHandGivesUpBeforeTaken(t *testing.T) {
	ch := make(chan Request[int, string]) // no committer takes it
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Hand(ctx, ch, nil, errors.New("closed"), 1)
	require.ErrorIs(t, err, context.Canceled)

	closing := make(chan struct{})
	close(closing)
	closed := errors.New("closed")
	_, err = Hand(t.Context(), ch, closing, closed, 1)
	require.ErrorIs(t, err, closed)
}
