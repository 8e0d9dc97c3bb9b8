package group

import (
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
