package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/deadletter"
)

// hostDo sends one request to base (a real server) with the Host header
// and Origin of a browser on host: what a page on a name rebound to the
// server's address sends.
func hostDo(t *testing.T, method, base, path, host, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Host = host
	req.Header.Set("Origin", "http://"+host)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	r := reply{status: res.StatusCode, header: res.Header, raw: string(b)}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(b, &r.json), "reply body %q", b)
	}
	return r
}

// DNS rebinding: a page on attacker.example, rebound to the API's address,
// can neither create a notification nor redrive a dead letter nor read
// anything; the probes still answer any Host; the API's own names pass.
func TestForeignHostRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{})
	reg := prometheus.NewRegistry()
	a, err := api.New(e.store, api.Config{DeadLetters: deadletter.New(e.store, nil), Registerer: reg,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), CORSOrigins: []string{"*"}})
	require.NoError(t, err)
	srv := httptestServer(t, a.Handler())
	ids := createN(t, e, 1)
	id, _ := strconv.ParseInt(ids[0], 10, 64)
	e.fail(t, id, "550 <no such user>")
	port := srv[strings.LastIndexByte(srv, ':')+1:]

	for _, host := range []string{"attacker.example:" + port, "attacker.example", "localhost.attacker.example:" + port, "127.1:" + port} {
		create := hostDo(t, http.MethodPost, srv, "/notifications", host, body(t, nil))
		requireError(t, create, http.StatusMisdirectedRequest, "host_not_allowed", "")
		require.Contains(t, create.errString("message"), host)
		require.NotEmpty(t, create.header.Get(api.HeaderRequestID))
		require.Empty(t, create.header.Get("Access-Control-Allow-Origin"), "no CORS answer for a foreign Host")
		redrive := hostDo(t, http.MethodPost, srv, "/dead-letters/redrive", host, `{"all": true}`)
		requireError(t, redrive, http.StatusMisdirectedRequest, "host_not_allowed", "")
		for _, path := range []string{"/notifications", "/notifications/" + ids[0], "/dead-letters", "/no-such-path"} {
			requireError(t, hostDo(t, http.MethodGet, srv, path, host, ""), http.StatusMisdirectedRequest, "host_not_allowed", "")
		}
		preflight := hostDo(t, http.MethodOptions, srv, "/notifications", host, "")
		require.Equal(t, http.StatusMisdirectedRequest, preflight.status)
		// Probes, the metrics and the document answer any Host.
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
			require.Equal(t, http.StatusOK, hostDo(t, http.MethodGet, srv, path, host, "").status, path)
		}
	}
	n, o := e.rows(t)
	require.Equal(t, 1, n, "no notification created")
	require.Equal(t, 1, o)
	dead := do(t, http.MethodGet, srv+"/dead-letters", nil, "")
	require.Equal(t, http.StatusOK, dead.status)
	require.Contains(t, dead.raw, `"id":"`+ids[0]+`"`, "the dead letter was not redriven")
	require.Equal(t, 4.0, requestCount(t, reg, "POST /notifications", "421"), "refusals are counted")

	// The API's own names: IP literals, localhost, with or without port.
	for _, host := range []string{"127.0.0.1:" + port, "127.0.0.1", "localhost:" + port, "LOCALHOST", "[::1]:" + port, "10.1.2.3:8080"} {
		r := hostDo(t, http.MethodGet, srv, "/notifications/"+ids[0], host, "")
		require.Equal(t, http.StatusOK, r.status, "%s: %s", host, r.raw)
	}
	r := hostDo(t, http.MethodPost, srv, "/notifications", "localhost:"+port, body(t, nil))
	require.Equal(t, http.StatusCreated, r.status, r.raw)
}

// requestCount is herald_http_requests_total of one route and code.
func requestCount(t *testing.T, reg *prometheus.Registry, route, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "herald_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// AllowedHosts adds the names a proxy serves the API under: exact names
// and suffixes; "*" turns the check off.
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	e := setup(t, api.Config{AllowedHosts: []string{"herald.example.com", ".corp.example"}})
	for host, want := range map[string]int{
		"herald.example.com":      http.StatusCreated,
		"HERALD.example.com:443":  http.StatusCreated,
		"corp.example":            http.StatusCreated,
		"api.corp.example:8443":   http.StatusCreated,
		"evilcorp.example":        http.StatusMisdirectedRequest,
		"herald.example.com.evil": http.StatusMisdirectedRequest,
		"attacker.example":        http.StatusMisdirectedRequest,
	} {
		r := hostDo(t, http.MethodPost, e.url, "/notifications", host, body(t, nil))
		require.Equal(t, want, r.status, "%s: %s", host, r.raw)
	}
	n, _ := e.rows(t)
	require.Equal(t, 4, n)

	anyHost := setup(t, api.Config{AllowedHosts: []string{"*"}})
	r := hostDo(t, http.MethodPost, anyHost.url, "/notifications", "attacker.example", body(t, nil))
	require.Equal(t, http.StatusCreated, r.status, r.raw)

	_, err := api.New(e.store, api.Config{AllowedHosts: []string{"herald.example.com:8080"}})
	require.ErrorContains(t, err, `"herald.example.com:8080"`)
}
