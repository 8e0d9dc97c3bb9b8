package main

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client's X-Request-Id comes back in the reply and is in the API's log
// line of the request and in the worker's line of its delivery;
// HERALD_CORS_ORIGINS lets the named origin's browser in.
func TestRequestIDReachesDeliveryLogAndCORS(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	p := startHerald(t, t.TempDir(), map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_RELAY_INTERVAL": "100ms",
		"HERALD_LOG_LEVEL": "debug", "HERALD_LOG_FORMAT": "json", "HERALD_CORS_ORIGINS": "https://app.example.com, http://localhost:3000"}, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	r := api.create(t, "ann@example.com", map[string]string{"X-Request-Id": "checkout-7f3a"})
	require.Equal(t, http.StatusCreated, r.Status, r.Body)
	api.headerOf(t, "checkout-7f3a")
	line := func(msg string) *regexp.Regexp {
		return regexp.MustCompile(`"msg":"` + msg + `"[^\n]*"request_id":"checkout-7f3a"`)
	}
	require.Eventually(t, func() bool {
		return line("delivery settled").MatchString(p.Log()) && line("http request").MatchString(p.Log())
	}, 15*time.Second, 10*time.Millisecond, "the API's and the worker's lines carry the request id")
	require.Regexp(t, `"msg":"delivery settled"[^\n]*"outcome":"sent"[^\n]*"request_id":"checkout-7f3a"`, p.Log())

	req, err := http.NewRequest(http.MethodOptions, api.base+"/notifications", nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "http://localhost:3000")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "http://localhost:3000", resp.Header.Get("Access-Control-Allow-Origin"))
}

// headerOf sends GET /healthz with the request id id and checks the reply
// echoes it.
func (c client) headerOf(t *testing.T, id string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+"/healthz", nil)
	require.NoError(t, err)
	req.Header.Set("X-Request-Id", id)
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, id, resp.Header.Get("X-Request-Id"))
}
