package raw

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	comm, fields, ok := parseStat("4242 (postgres: main (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 11 5 20 0")
	require.True(t, ok)
	require.Equal(t, "postgres: main (x)", comm)
	require.Equal(t, "S", fields[0])
	require.Equal(t, "1", fields[1])
	require.Equal(t, []string{"7", "3", "11", "5"}, fields[11:15])
	_, _, ok = parseStat("garbage")
	require.False(t, ok)
}

// The clock counts this process's own work: a busy loop of 200ms of CPU
// shows as at least most of it in Herald and in the machine's busy time.
func TestCPUClockCountsSelf(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	c0, err := ReadCPUClock("postgres")
	require.NoError(t, err)
	spin(200 * time.Millisecond)
	c1, err := ReadCPUClock("postgres")
	require.NoError(t, err)
	s := c1.Sub(c0)
	require.GreaterOrEqual(t, s.Herald, 150*time.Millisecond)
	require.Greater(t, s.Busy, 0.0)
	require.LessOrEqual(t, s.Busy, 1.0)
	require.GreaterOrEqual(t, s.Database, time.Duration(0))
}

func spin(d time.Duration) {
	var ru0 = cpuSelf()
	x := 0
	for cpuSelf()-ru0 < d {
		for i := range 100000 {
			x += i
		}
	}
	_ = x
}

func cpuSelf() time.Duration {
	c, _ := ReadCPUClock("")
	return c.Self
}

// A process counts from its first reading: one that ran through the span
// counts its difference, one that started during it all its time, one
// that exited nothing more (its time before the span is not subtracted).
func TestCPUSplitAcrossRestarts(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	c0 := CPUClock{Self: ms(100), Busy: ms(1000), Total: ms(4000),
		database: map[int]time.Duration{1: ms(50)}, broker: map[int]time.Duration{7: ms(900)}}
	c1 := CPUClock{Self: ms(300), Busy: ms(2000), Total: ms(6000),
		database: map[int]time.Duration{1: ms(350), 2: ms(40)}, broker: map[int]time.Duration{8: ms(30)}}
	s := c1.Sub(c0)
	require.Equal(t, ms(200), s.Herald)
	require.Equal(t, ms(340), s.Database)
	require.Equal(t, ms(30), s.Broker)
	require.Equal(t, ms(1000-200-340-30), s.Other)
	require.InDelta(t, 0.5, s.Busy, 1e-9)
}
