package consume

import (
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeldTakesEachOnceInOrder(t *testing.T) {
	var h Held[string]
	require.Empty(t, h.Take())
	h.Add("a")
	h.Add("b")
	require.Equal(t, []string{"a", "b"}, h.Take())
	require.Empty(t, h.Take(), "what was taken is not handed back twice")
	h.Add("c")
	require.Equal(t, []string{"c"}, h.Take())
}

func TestHeldConcurrentAdds(t *testing.T) {
	var h Held[int]
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() { h.Add(i) })
	}
	wg.Wait()
	got := h.Take()
	sort.Ints(got)
	want := make([]int, 100)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, got)
}
