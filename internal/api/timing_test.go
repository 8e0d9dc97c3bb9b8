package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
)

// The timing fields' bad input: each a 400 naming its field, and nothing
// stored.
func TestCreateRejectsBadTiming(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{ScheduleHorizon: 48 * time.Hour})
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for name, tc := range map[string]struct {
		changes map[string]any
		field   string
	}{
		"send_at not RFC 3339":        {map[string]any{"send_at": "tomorrow"}, "send_at"},
		"send_at a number":            {map[string]any{"send_at": 1700000000}, "send_at"},
		"send_at without zone":        {map[string]any{"send_at": "2026-01-02T15:04:05"}, "send_at"},
		"send_at beyond the horizon":  {map[string]any{"send_at": time.Now().Add(49 * time.Hour).UTC().Format(time.RFC3339)}, "send_at"},
		"expires_at not RFC 3339":     {map[string]any{"expires_at": "soon"}, "expires_at"},
		"expires_at in the past":      {map[string]any{"expires_at": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)}, "expires_at"},
		"expires_at before send_at":   {map[string]any{"send_at": future, "expires_at": time.Now().Add(30 * time.Minute).UTC().Format(time.RFC3339)}, "expires_at"},
		"expires_at equal to send_at": {map[string]any{"send_at": future, "expires_at": future}, "expires_at"},
		"unknown time zone":           {map[string]any{"time_zone": "Mars/Olympus", "quiet_hours": map[string]any{"start": "22:00", "end": "08:00"}}, "time_zone"},
		"Local is not a zone":         {map[string]any{"time_zone": "Local"}, "time_zone"},
		"empty time zone":             {map[string]any{"time_zone": ""}, "time_zone"},
		"quiet hours without zone":    {map[string]any{"quiet_hours": map[string]any{"start": "22:00", "end": "08:00"}}, "time_zone"},
		"quiet hours bad start":       {map[string]any{"time_zone": "UTC", "quiet_hours": map[string]any{"start": "25:00", "end": "08:00"}}, "quiet_hours"},
		"quiet hours missing end":     {map[string]any{"time_zone": "UTC", "quiet_hours": map[string]any{"start": "22:00"}}, "quiet_hours"},
		"quiet hours empty window":    {map[string]any{"time_zone": "UTC", "quiet_hours": map[string]any{"start": "22:00", "end": "22:00"}}, "quiet_hours"},
		"urgent not a boolean":        {map[string]any{"urgent": "yes"}, "urgent"},
		"expires inside quiet hours":  {map[string]any{"time_zone": "UTC", "quiet_hours": quietNow(), "expires_at": time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}, "expires_at"},
	} {
		t.Run(name, func(t *testing.T) {
			r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), body(t, tc.changes))
			requireError(t, r, http.StatusBadRequest, "invalid_field", tc.field)
		})
	}
	n, o := e.rows(t)
	require.Zero(t, n)
	require.Zero(t, o)
}

// quietNow is a quiet window in UTC that holds now and ends in about two
// hours.
func quietNow() map[string]any {
	now := time.Now().UTC()
	return map[string]any{"start": now.Add(-time.Hour).Format("15:04"), "end": now.Add(2 * time.Hour).Format("15:04")}
}

// send_at ahead shows scheduled with its send_at; in the past, pending;
// quiet hours defer send_at to the window's end unless urgent; the
// listing's status=scheduled filter finds the scheduled one.
func TestCreateScheduled(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), body(t, map[string]any{
		"send_at": at.Format(time.RFC3339), "expires_at": at.Add(time.Hour).Format(time.RFC3339)}))
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "scheduled", r.json["status"])
	require.Equal(t, at.Format(time.RFC3339Nano), r.json["send_at"])
	require.Equal(t, at.Add(time.Hour).Format(time.RFC3339Nano), r.json["expires_at"])
	id := r.json["id"].(string)
	g := do(t, http.MethodGet, e.url+"/notifications/"+id, nil, "")
	require.Equal(t, "scheduled", g.json["status"])

	past := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), body(t, map[string]any{
		"send_at": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}))
	require.Equal(t, http.StatusCreated, past.status, past.raw)
	require.Equal(t, "pending", past.json["status"])

	quiet := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), body(t, map[string]any{
		"time_zone": "UTC", "quiet_hours": quietNow()}))
	require.Equal(t, http.StatusCreated, quiet.status, quiet.raw)
	require.Equal(t, "scheduled", quiet.json["status"])
	end, err := time.Parse(time.RFC3339, quiet.json["send_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), end, 2*time.Minute)
	require.Zero(t, end.Second(), "the window's end, on the minute")

	urgent := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), body(t, map[string]any{
		"time_zone": "UTC", "quiet_hours": quietNow(), "urgent": true}))
	require.Equal(t, http.StatusCreated, urgent.status, urgent.raw)
	require.Equal(t, "pending", urgent.json["status"])
	require.Nil(t, urgent.json["send_at"])

	l := do(t, http.MethodGet, e.url+"/notifications?status=scheduled", nil, "")
	require.Equal(t, http.StatusOK, l.status, l.raw)
	var got []string
	for _, it := range l.json["items"].([]any) {
		got = append(got, it.(map[string]any)["id"].(string))
	}
	require.ElementsMatch(t, []string{id, quiet.json["id"].(string)}, got)
}
