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
		"1.1.1.1":              "",
		"2001:4860:4860::8888": "",
		"2606:4700:4700::1111": "",
		"127.0.0.1":            "loopback",
		"127.255.0.1":          "loopback",
		"::1":                  "loopback",
		"::ffff:127.0.0.1":     "loopback",
		"::ffff:10.0.0.1":      "private",
		"::ffff:8.8.8.8":       "",
		"172.31.255.255":       "private",
		"172.32.0.1":           "",
		"169.254.169.254":      "link-local (cloud metadata included)",
		"fe80::1":              "link-local",
		"fe80::1%eth0":         "link-local",
		"fd12::1":              "private (unique local)",
		"100.64.0.1":           "shared (CGNAT)",
		"100.128.0.1":          "",
		"239.1.1.1":            "multicast",
		"ff02::1":              "multicast",
		"0.0.0.0":              "unspecified (this network)",
		"::":                   "unspecified",
		"255.255.255.255":      "broadcast",
		"240.0.0.1":            "reserved",
		"192.0.0.9":            "IETF protocol assignment",
		"192.0.2.1":            "documentation",
		"192.31.196.1":         "AS112 anycast",
		"192.88.99.1":          "6to4 relay anycast (deprecated)",
		"198.19.255.255":       "benchmarking",
		"198.20.0.1":           "",
		// Embedded IPv4 (NAT64, well-known prefix): the IPv4 address
		// decides.
		"64:ff9b::a9fe:a9fe": "link-local (cloud metadata included)",
		"64:ff9b::7f00:1":    "loopback",
		"64:ff9b::808:808":   "",
		// The gaps issue 33 found, and their neighbours.
		"64:ff9b:1::a9fe:a9fe":                 "local-use NAT64",
		"64:ff9b:1::808:808":                   "local-use NAT64",
		"2002:7f00:1::1":                       "6to4",
		"2002:808:808::1":                      "6to4",
		"::ffff:0:7f00:1":                      "IPv4-translated (SIIT)",
		"::ffff:0:808:808":                     "IPv4-translated (SIIT)",
		"::7f00:1":                             "IPv4-compatible (deprecated)",
		"fec0::1":                              "site-local (deprecated)",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2": "Teredo",
		"2001:1::1":                            "IETF protocol assignment",
		"2001:200::1":                          "",
		"2001:db8::1":                          "documentation",
		"3fff::1":                              "documentation",
		"5f00::1":                              "segment routing (SRv6)",
		"100::1":                               "discard-only",
		"2620:4f:8000::1":                      "AS112 anycast",
		"2620:4f:8001::1":                      "",
		"4000::1":                              "reserved",
		"e000::1":                              "reserved",
		"1::1":                                 "reserved",
	} {
		require.Equal(t, want, refusal(netip.MustParseAddr(addr), nil), addr)
	}
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	require.Empty(t, refusal(netip.MustParseAddr("::ffff:127.0.0.1"), allow))
	require.Empty(t, refusal(netip.MustParseAddr("64:ff9b::7f00:1"), allow), "NAT64 of an allowed address")
	require.Equal(t, "loopback", refusal(netip.MustParseAddr("::1"), allow))
	require.Equal(t, "6to4", refusal(netip.MustParseAddr("2002:7f00:1::1"), allow), "6to4 is refused as a range")
	allow = []netip.Prefix{netip.MustParsePrefix("2002::/16"), netip.MustParsePrefix("64:ff9b::/96")}
	require.Empty(t, refusal(netip.MustParseAddr("2002:7f00:1::1"), allow))
	require.Empty(t, refusal(netip.MustParseAddr("64:ff9b::7f00:1"), allow), "allowed as written")
}

// ianaSpecialPurpose is IANA's IPv4 and IPv6 Special-Purpose Address
// Registries (every entry, as published in 2025), copied here by hand
// apart from guardRules: each entry must be refused at its first, middle
// and last address, but the two that stand for an IPv4 address.
var ianaSpecialPurpose = []string{
	"0.0.0.0/8", "0.0.0.0/32", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.0.0/29", "192.0.0.8/32", "192.0.0.9/32", "192.0.0.10/32",
	"192.0.0.170/32", "192.0.0.171/32", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
	"192.88.99.0/24", "192.88.99.2/32", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "255.255.255.255/32",
	"::1/128", "::/128", "64:ff9b:1::/48", "100::/64", "100:0:0:1::/64", "2001::/23", "2001::/32",
	"2001:1::1/128", "2001:1::2/128", "2001:1::3/128", "2001:2::/48", "2001:3::/32", "2001:4:112::/48",
	"2001:10::/28", "2001:20::/28", "2001:30::/28", "2001:db8::/32", "2002::/16", "2620:4f:8000::/48",
	"3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10",
	// Not in the special-purpose registries; refused all the same.
	"224.0.0.0/4", "ff00::/8", "fec0::/10", "::/96", "::ffff:0:0:0/96",
}

func TestRefusalCoversIANA(t *testing.T) {
	t.Parallel()
	for _, cidr := range ianaSpecialPurpose {
		p := netip.MustParsePrefix(cidr)
		first := p.Addr()
		b := first.AsSlice()
		for i := range b {
			if i*8 >= p.Bits() {
				b[i] = 0xff
			} else if rest := p.Bits() - i*8; rest < 8 {
				b[i] |= 0xff >> rest
			}
		}
		last, _ := netip.AddrFromSlice(b)
		mid := first.AsSlice()
		if p.Bits() < first.BitLen() {
			mid[p.Bits()/8] |= 0x80 >> (p.Bits() % 8)
		}
		middle, _ := netip.AddrFromSlice(mid)
		for _, a := range []netip.Addr{first, middle, last} {
			require.True(t, p.Contains(a), "%s in %s", a, p)
			require.NotEmpty(t, refusal(a, nil), "%s (in %s) is not refused", a, p)
		}
	}
	// The two that stand for an IPv4 address are judged by it.
	for _, cidr := range []string{"::ffff:0:0/96", "64:ff9b::/96"} {
		p := netip.MustParsePrefix(cidr)
		b := p.Addr().As16()
		copy(b[12:], []byte{8, 8, 8, 8})
		require.Empty(t, refusal(netip.AddrFrom16(b), nil), cidr)
		copy(b[12:], []byte{169, 254, 169, 254})
		require.NotEmpty(t, refusal(netip.AddrFrom16(b), nil), cidr)
	}
}

// The rules are written most specific first: none may be hidden by an
// earlier one, which would make its reason unreachable.
func TestGuardRulesOrder(t *testing.T) {
	t.Parallel()
	for i, r := range guardRules {
		for _, e := range guardRules[:i] {
			require.False(t, e.prefix.Bits() <= r.prefix.Bits() && e.prefix.Contains(r.prefix.Addr()),
				"rule %s is hidden by the earlier %s", r.prefix, e.prefix)
		}
		require.Equal(t, r.prefix.Masked(), r.prefix, "rule %s is not masked", r.prefix)
		if r.act == refuse {
			require.NotEmpty(t, r.reason, r.prefix)
		}
	}
}

func TestParseIPv4(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]string{
		"2130706433":      "127.0.0.1",
		"0x7f000001":      "127.0.0.1",
		"0X7F000001":      "127.0.0.1",
		"017700000001":    "127.0.0.1",
		"0177.0.0.1":      "127.0.0.1",
		"127.1":           "127.0.0.1",
		"0x7f.1":          "127.0.0.1",
		"127.0.1":         "127.0.0.1",
		"127.0.0.1.":      "127.0.0.1",
		"127.000.0.01":    "127.0.0.1",
		"0":               "0.0.0.0",
		"0x":              "0.0.0.0",
		"0xA9.0376.43518": "169.254.169.254",
		"4294967295":      "255.255.255.255",
		"1.16777215":      "1.255.255.255",
		"1.2.65535":       "1.2.255.255",
		"8.8.8.8":         "8.8.8.8",
	} {
		got, ok := parseIPv4(host)
		require.True(t, ok, host)
		require.Equal(t, want, got.String(), host)
		require.True(t, endsInNumber(host), host)
	}
	for _, host := range []string{
		"", ".", "4294967296", "256.1", "1.16777216", "1.2.65536", "1.2.3.256", "1.2.3.4.5", "1..2",
		".1.2.3", "09", "08.1", "0x1g", "1.2.3.4..", "99999999999999999999999", "0x1.0xfffffffffffffffffffff",
	} {
		_, ok := parseIPv4(host)
		require.False(t, ok, host)
	}
	for _, host := range []string{"example.com", "0x7f.example", "1.2.3.example", "example.0x1g", "example.com.", "", "."} {
		require.False(t, endsInNumber(host), host)
	}
	for _, host := range []string{"example.09", "example.0x", "a.1.", "1.2.3.4.5"} {
		require.True(t, endsInNumber(host), host)
	}
}
