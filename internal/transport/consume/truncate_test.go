package consume

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestTruncate(t *testing.T) {
	require.Equal(t, "short", Truncate("short", 10))
	require.Equal(t, "abc", Truncate("abcdef", 3))
	// "é" is two bytes: a cut in its middle drops it whole.
	require.Equal(t, "ab", Truncate("abé", 3))
	require.Equal(t, "abé", Truncate("abé", 4))
	long := strings.Repeat("€", MaxReason)
	got := Truncate(long, MaxReason)
	require.LessOrEqual(t, len(got), MaxReason)
	require.True(t, utf8.ValidString(got))
	require.Equal(t, MaxReason/3*3, len(got))
}

func TestSampleIDs(t *testing.T) {
	require.Equal(t, "ids 1, 2", SampleIDs([]string{"1", "2"}))
	require.Equal(t, "ids 1, 2, 3, 4, 5", SampleIDs([]string{"1", "2", "3", "4", "5"}))
	require.Equal(t, "ids 1, 2, 3, 4, 5 and 2 more", SampleIDs([]string{"1", "2", "3", "4", "5", "6", "7"}))
}
