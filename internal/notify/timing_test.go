package notify

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQuietHoursDefer(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	night := QuietHours{Start: 22 * 60, End: 8 * 60, Location: berlin}
	day := QuietHours{Start: 9 * 60, End: 17 * 60, Location: ny}
	at := func(loc *time.Location, s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		require.NoError(t, err)
		return v
	}
	for name, tc := range map[string]struct {
		q        QuietHours
		in, want time.Time
	}{
		"before the window":       {night, at(berlin, "2026-06-10 21:59"), at(berlin, "2026-06-10 21:59")},
		"at its start":            {night, at(berlin, "2026-06-10 22:00"), at(berlin, "2026-06-11 08:00")},
		"after midnight":          {night, at(berlin, "2026-06-11 03:30"), at(berlin, "2026-06-11 08:00")},
		"at its end":              {night, at(berlin, "2026-06-11 08:00"), at(berlin, "2026-06-11 08:00")},
		"a window within one day": {day, at(ny, "2026-06-10 12:00"), at(ny, "2026-06-10 17:00")},
		"outside it":              {day, at(ny, "2026-06-10 08:59"), at(ny, "2026-06-10 08:59")},
		// Europe/Berlin springs forward on 2026-03-29 at 02:00: the night
		// is an hour short, and the window still ends at 08:00 local.
		"across spring forward": {night, at(berlin, "2026-03-28 23:00"), time.Date(2026, 3, 29, 6, 0, 0, 0, time.UTC)},
		// and falls back on 2026-10-25 at 03:00: an hour longer.
		"across fall back": {night, at(berlin, "2026-10-24 23:00"), time.Date(2026, 10, 25, 7, 0, 0, 0, time.UTC)},
	} {
		t.Run(name, func(t *testing.T) {
			got := tc.q.Defer(tc.in)
			require.True(t, tc.want.Equal(got), "got %s, want %s", got.UTC(), tc.want.UTC())
		})
	}
	// From 23:00 the window lasts 9 hours on most nights, 8 across spring
	// forward and 10 across fall back.
	require.Equal(t, 9*time.Hour, night.Defer(at(berlin, "2026-06-10 23:00")).Sub(at(berlin, "2026-06-10 23:00")))
	require.Equal(t, 8*time.Hour, night.Defer(at(berlin, "2026-03-28 23:00")).Sub(at(berlin, "2026-03-28 23:00")))
	require.Equal(t, 10*time.Hour, night.Defer(at(berlin, "2026-10-24 23:00")).Sub(at(berlin, "2026-10-24 23:00")))
}

func TestParseClock(t *testing.T) {
	m, err := ParseClock("22:30")
	require.NoError(t, err)
	require.Equal(t, 22*60+30, m)
	for _, bad := range []string{"", "24:00", "7:00", "07:60", "07:00:00", "x"} {
		_, err := ParseClock(bad)
		require.Error(t, err, bad)
	}
}

func TestStatusAt(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Minute)
	n := Notification{Status: StatusPending, SendAt: &later}
	require.Equal(t, StatusScheduled, n.StatusAt(now))
	require.Equal(t, StatusPending, n.StatusAt(later))
	n.Status = StatusCanceled
	require.Equal(t, StatusCanceled, n.StatusAt(now))
}
