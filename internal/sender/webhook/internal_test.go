package webhook

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"0":   0,
		"5":   5 * time.Second,
		" 60": time.Minute,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
		now.Add(48 * time.Hour).Format(http.TimeFormat):   maxRetryAfter,
	} {
		got, ok := retryAfter(v, now)
		require.True(t, ok, v)
		require.Equal(t, want, got, v)
	}
	for _, v := range []string{"", "-1", "soon", "1.5"} {
		_, ok := retryAfter(v, now)
		require.False(t, ok, v)
	}
}

func TestRefusal(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"8.8.8.8":              "",
		"2001:4860:4860::8888": "",
		"127.0.0.1":            "loopback",
		"127.255.0.1":          "loopback",
		"::1":                  "loopback",
		"::ffff:127.0.0.1":     "loopback",
		"::ffff:10.0.0.1":      "private",
		"172.31.255.255":       "private",
		"172.32.0.1":           "",
		"169.254.169.254":      "link-local (cloud metadata included)",
		"fe80::1":              "link-local",
		"fd12::1":              "private (unique local)",
		"100.64.0.1":           "shared (CGNAT)",
		"100.128.0.1":          "",
		"239.1.1.1":            "multicast",
		"ff02::1":              "multicast",
		"0.0.0.0":              "unspecified (this network)",
		"::":                   "unspecified",
		"64:ff9b::a9fe:a9fe":   "link-local (cloud metadata included)",
		"64:ff9b::808:808":     "",
	} {
		require.Equal(t, want, refusal(netip.MustParseAddr(addr), nil), addr)
	}
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	require.Empty(t, refusal(netip.MustParseAddr("::ffff:127.0.0.1"), allow))
	require.Equal(t, "loopback", refusal(netip.MustParseAddr("::1"), allow))
}
