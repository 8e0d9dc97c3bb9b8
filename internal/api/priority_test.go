package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
)

// priority (issue 34, point 5): high, normal or bulk, normal when absent;
// the answer, the read and the listing show it; a bad value is a 400 on
// priority, on a create and on a batch item alone, and stores nothing.
func TestCreatePriority(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	for _, p := range []string{"", "high", "normal", "bulk"} {
		changes := map[string]any{}
		want := "normal"
		if p != "" {
			changes["priority"], want = p, p
		}
		r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), body(t, changes))
		require.Equal(t, http.StatusCreated, r.status, r.raw)
		require.Equal(t, want, r.json["priority"], "create with %q", p)
		g := do(t, http.MethodGet, e.url+"/notifications/"+r.json["id"].(string), nil, "")
		require.Equal(t, want, g.json["priority"], "read of %q", p)
	}
	l := do(t, http.MethodGet, e.url+"/notifications", nil, "")
	require.Equal(t, http.StatusOK, l.status)
	for _, it := range l.json["items"].([]any) {
		require.Contains(t, []any{"high", "normal", "bulk"}, it.(map[string]any)["priority"])
	}
	n0, o0 := e.rows(t)

	for name, v := range map[string]any{"unknown": "urgent", "empty": "", "upper case": "HIGH", "a number": 1, "null is absent, not bad": nil} {
		t.Run(name, func(t *testing.T) {
			if v == nil {
				return
			}
			r := do(t, http.MethodPost, e.url+"/notifications", jsonHeaders(), body(t, map[string]any{"priority": v}))
			requireError(t, r, http.StatusBadRequest, "invalid_field", "priority")
		})
	}
	n, o := e.rows(t)
	require.Equal(t, n0, n, "a refused create stores nothing")
	require.Equal(t, o0, o)
}

// A batch item's priority is its own; a bad one fails that item alone,
// naming notifications[i].priority.
func TestBatchPriority(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	r := do(t, http.MethodPost, e.url+"/notifications/batch", jsonHeaders(), batchBody(t,
		item(0, map[string]any{"priority": "bulk"}),
		item(1, map[string]any{"priority": "asap"}),
		item(2, map[string]any{"priority": "high"}),
		item(3, nil),
	))
	res := results(t, r)
	require.Len(t, res, 4)
	resultError(t, res[1], 400, "invalid_field", "notifications[1].priority")
	for i, want := range map[int]string{0: "bulk", 2: "high", 3: "normal"} {
		require.EqualValues(t, 201, res[i]["status"], "%v", res[i])
		g := do(t, http.MethodGet, e.url+"/notifications/"+res[i]["id"].(string), nil, "")
		require.Equal(t, want, g.json["priority"], "item %d", i)
	}
}
