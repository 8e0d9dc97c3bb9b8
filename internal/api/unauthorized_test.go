package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
)

// A 401 names the setting the token comes from (issue 38), so that a
// caller who reached the API without it (a CLI with HERALD_API_URL, a
// script) knows what to pass; the token itself never appears.
func TestUnauthorizedNamesTheSetting(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	e := setup(t, api.Config{Token: token})
	for name, auth := range map[string][]string{"missing": nil, "wrong": {"Bearer wrong-token"}} {
		r := do(t, http.MethodGet, e.url+"/notifications", map[string][]string{"Authorization": auth}, "")
		requireError(t, r, http.StatusUnauthorized, "unauthorized", "")
		require.Contains(t, r.errString("message"), "HERALD_API_TOKEN", name)
		require.Contains(t, r.errString("message"), "Authorization: Bearer", name)
		require.NotContains(t, r.raw, token)
	}
}
