package hostcheck_test

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/hostcheck"
)

func TestAllows(t *testing.T) {
	t.Parallel()
	none, err := hostcheck.New(nil)
	require.NoError(t, err)
	listed, err := hostcheck.New([]string{" Herald.Example.com ", ".corp.example", "", "api_1", "10.0.0.5"})
	require.NoError(t, err)
	anyHost, err := hostcheck.New([]string{"herald.example.com", "*"})
	require.NoError(t, err)

	for _, tc := range []struct {
		host                string
		none, listed, anyOK bool
	}{
		// Always: IP literals, localhost, no Host.
		{"", true, true, true},
		{"127.0.0.1", true, true, true},
		{"127.0.0.1:8080", true, true, true},
		{"127.9.9.9:1", true, true, true},
		{"192.0.2.7:8080", true, true, true},
		{"[::1]", true, true, true},
		{"[::1]:8080", true, true, true},
		{"[2001:db8::1]:443", true, true, true},
		{"::1", true, true, true},
		{"localhost", true, true, true},
		{"LOCALHOST:8080", true, true, true},
		{"localhost.:8080", true, true, true},
		// Names are refused unless listed.
		{"attacker.example", false, false, true},
		{"attacker.example:8080", false, false, true},
		{"localhost.attacker.example", false, false, true},
		{"herald.example.com", false, true, true},
		{"HERALD.example.com.:443", false, true, true},
		{"evilherald.example.com", false, false, true},
		{"corp.example", false, true, true},
		{"api.corp.example:8080", false, true, true},
		{"a.b.corp.example", false, true, true},
		{"xcorp.example", false, false, true},
		{"api_1:8080", false, true, true},
		// Legacy spellings of 127.0.0.1 are names to a resolver; a browser
		// rewrites them to the dotted quad before sending.
		{"2130706433", false, false, true},
		{"0x7f000001:8080", false, false, true},
		{"127.1", false, false, true},
		{"0177.0.0.1", false, false, true},
		// Unreadable Hosts are refused.
		{"localhost:http", false, false, true},
		{"[::1", false, false, true},
		{"[127.0.0.1]", false, false, true},
		{"a:b:c", false, false, true},
		{":8080", false, false, true},
	} {
		require.Equal(t, tc.none, none.Allows(tc.host), "no names: %q", tc.host)
		require.Equal(t, tc.listed, listed.Allows(tc.host), "listed names: %q", tc.host)
		require.Equal(t, tc.anyOK, anyHost.Allows(tc.host), "*: %q", tc.host)
	}
	var nilSet *hostcheck.Set
	require.True(t, nilSet.Allows("127.0.0.1:80"))
	require.False(t, nilSet.Allows("attacker.example"))
	require.False(t, none.Names())
	require.True(t, listed.Names())
	require.True(t, anyHost.Any())
}

func TestAllowsOrigin(t *testing.T) {
	t.Parallel()
	s, err := hostcheck.New([]string{"herald.example.com"})
	require.NoError(t, err)
	for origin, want := range map[string]bool{
		"http://127.0.0.1:8080":          true,
		"http://localhost:3000":          true,
		"https://herald.example.com":     true,
		"https://herald.example.com:444": true,
		"http://attacker.example:8080":   false,
		"null":                           false,
		"":                               false,
		"://":                            false,
	} {
		require.Equal(t, want, s.AllowsOrigin(origin), origin)
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	for _, e := range []string{"*.example.com", "herald.example.com:8080", "http://herald.example.com", "herald.example.com/ui", ".", "..example.com", "bad name", strings.Repeat("a", 64) + ".example"} {
		_, err := hostcheck.New([]string{"ok.example", e})
		require.Error(t, err, e)
		require.Contains(t, err.Error(), e, "the error names the entry")
	}
}

// A refusal is logged with the Host, and a burst of refusals is logged a
// few times with the count of those left out.
func TestGuardLogs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	g := hostcheck.NewGuard(nil, slog.New(slog.NewTextHandler(&buf, nil)))
	for range 50 {
		r := httptest.NewRequest("POST", "http://attacker.example:8080/notifications", nil)
		require.False(t, g.Allow(r))
	}
	require.True(t, g.Allow(httptest.NewRequest("GET", "http://127.0.0.1/notifications", nil)))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 1)
	require.Less(t, len(lines), 10, "refusals are rate-limited in the log")
	require.Contains(t, lines[0], "level=WARN")
	require.Contains(t, lines[0], "host=attacker.example:8080")
	require.Contains(t, lines[0], "path=/notifications")
}
