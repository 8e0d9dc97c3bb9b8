package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hostRequest sends one request to herald at base with the Host (and the
// Origin) a browser on host sends.
func hostRequest(t *testing.T, method, base, path, host, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Host = host
	req.Header.Set("Origin", "http://"+host)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// DNS rebinding against `herald serve`: a page on a name rebound to the
// listener's address can create nothing and reach neither the API nor the
// console; herald's own names and those of HERALD_ALLOWED_HOSTS pass, the
// probes answer any Host, and each refusal is logged with its Host.
func TestServeRefusesForeignHost(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	p := startHerald(t, t.TempDir(), map[string]string{"HERALD_HTTP_ADDR": addr, "HERALD_ALLOWED_HOSTS": "herald.example.test, .corp.example.test"}, "serve")
	base := "http://" + addr
	waitHTTP(t, base+"/healthz")
	body := `{"user_id":"u1","channel":"email","to":"a@example.com","subject":"s","body":"b"}`

	evil := "attacker.example:" + port
	code, reply := hostRequest(t, http.MethodPost, base, "/notifications", evil, body, nil)
	require.Equal(t, http.StatusMisdirectedRequest, code, reply)
	var e struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(reply), &e), reply)
	require.Equal(t, "host_not_allowed", e.Error.Code)
	require.Contains(t, e.Error.Message, "HERALD_ALLOWED_HOSTS")
	for _, path := range []string{"/notifications", "/dead-letters", "/ui/", "/ui/dead-letters", "/ui/login"} {
		code, page := hostRequest(t, http.MethodGet, base, path, evil, "", nil)
		require.Equal(t, http.StatusMisdirectedRequest, code, path)
		require.NotContains(t, page, `name="csrf"`, path)
	}
	code, _ = hostRequest(t, http.MethodPost, base, "/ui/dead-letters/redrive", evil, "", nil)
	require.Equal(t, http.StatusMisdirectedRequest, code)
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
		code, _ := hostRequest(t, http.MethodGet, base, path, evil, "", nil)
		require.Equal(t, http.StatusOK, code, path)
	}
	p.requireLog("request refused: its Host is not a name of this server", "host=attacker.example:"+port)

	// Nothing was created; herald's own names and the listed ones pass.
	code, reply = hostRequest(t, http.MethodGet, base, "/notifications", "127.0.0.1:"+port, "", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"items":[]}`, reply)
	for _, host := range []string{"localhost:" + port, "herald.example.test", "api.corp.example.test:" + port} {
		code, reply := hostRequest(t, http.MethodPost, base, "/notifications", host, body, nil)
		require.Equal(t, http.StatusCreated, code, "%s: %s", host, reply)
		code, _ = hostRequest(t, http.MethodGet, base, "/ui/", host, "", nil)
		require.Equal(t, http.StatusOK, code, host)
	}
	// The console's login metrics are registered (and documented).
	require.Equal(t, 0.0, scrape(t, base+"/metrics", "herald_console_login_failures_total"))
	require.Equal(t, 0.0, scrape(t, base+"/metrics", `herald_console_login_throttled_total{limit="address"}`))
}

// A HERALD_ALLOWED_HOSTS entry that is not a name is a usage error (exit
// 2) naming it.
func TestAllowedHostsRefused(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"herald.example.com:8080", "*.example.com", "https://herald.example.com"} {
		var stdout, stderr bytes.Buffer
		vars := map[string]string{"HERALD_ALLOWED_HOSTS": "ok.example, " + bad}
		err := run(t.Context(), []string{"api", "--database-url", "sqlite:" + t.TempDir() + "/x.db"}, func(k string) string { return vars[k] }, &stdout, &stderr)
		require.ErrorIs(t, err, errUsage, "%s: %v", bad, err)
		require.ErrorContains(t, err, "HERALD_ALLOWED_HOSTS")
		require.ErrorContains(t, err, bad)
	}
}

// allowedHosts adds HERALD_HTTP_ADDR's name, and none for an address or
// all interfaces.
func TestAllowedHostsListenName(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string][]string{
		"127.0.0.1:8080":     nil,
		"0.0.0.0:8080":       nil,
		":8080":              nil,
		"[::]:8080":          nil,
		"herald.lan:8080":    {"herald.lan"},
		"localhost:8080":     {"localhost"},
		"[2001:db8::1]:8080": nil,
	} {
		got, err := allowedHosts(Config{HTTPAddr: addr})
		require.NoError(t, err)
		require.Equal(t, want, got, addr)
	}
	got, err := allowedHosts(Config{HTTPAddr: "herald.lan:8080", AllowedHosts: " a.example ,, .b.example "})
	require.NoError(t, err)
	require.Equal(t, []string{"a.example", ".b.example", "herald.lan"}, got)
}
