package webhook

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// refusedRange is a range of addresses a webhook is not sent to unless
// Config.Allow opens it, with the reason a refusal names.
type refusedRange struct {
	prefix netip.Prefix
	reason string
}

// refusedRanges are the destinations a request from herald must not reach
// by default: the host itself, the networks behind it, the cloud metadata
// service, and addresses that are not one host. IPv4-mapped IPv6
// addresses (::ffff:a.b.c.d) are checked as the IPv4 address they map.
var refusedRanges = func() []refusedRange {
	var rs []refusedRange
	for _, r := range []struct{ cidr, reason string }{
		{"0.0.0.0/8", "unspecified (this network)"},
		{"127.0.0.0/8", "loopback"},
		{"10.0.0.0/8", "private"},
		{"172.16.0.0/12", "private"},
		{"192.168.0.0/16", "private"},
		{"100.64.0.0/10", "shared (CGNAT)"},
		{"169.254.0.0/16", "link-local (cloud metadata included)"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved (broadcast included)"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible IPv6 (deprecated)"},
		{"fc00::/7", "private (unique local)"},
		{"fe80::/10", "link-local"},
		{"ff00::/8", "multicast"},
	} {
		rs = append(rs, refusedRange{netip.MustParsePrefix(r.cidr), r.reason})
	}
	return rs
}()

// nat64 is the well-known NAT64 prefix (RFC 6052): its addresses reach the
// IPv4 address in their last 32 bits, which is checked instead.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// refusal says why addr is refused, or "" when a webhook may go there.
// allow opens ranges that would be refused (HERALD_WEBHOOK_ALLOW).
func refusal(addr netip.Addr, allow []netip.Prefix) string {
	addr = addr.WithZone("").Unmap()
	if nat64.Contains(addr) {
		b := addr.As16()
		addr = netip.AddrFrom4([4]byte(b[12:]))
	}
	for _, p := range allow {
		if p.Contains(addr) {
			return ""
		}
	}
	for _, r := range refusedRanges {
		if r.prefix.Contains(addr) {
			return r.reason
		}
	}
	return ""
}

// RefusedError is a destination the SSRF guard refused: the address is in
// a range webhooks are not sent to (see Config.Allow).
type RefusedError struct {
	Addr   netip.Addr
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("destination %s refused: %s address (open it with HERALD_WEBHOOK_ALLOW)", e.Addr, e.Reason)
}

// control runs on every connection the sender dials, after DNS, on the
// address actually dialled: a name that resolves (or re-resolves, DNS
// rebinding) to a refused address cannot pass, nor can a redirect.
func (s *Sender) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dialled address %q: %w", address, err)
	}
	if reason := refusal(ap.Addr(), s.cfg.Allow); reason != "" {
		return &RefusedError{Addr: ap.Addr().WithZone(""), Reason: reason}
	}
	return nil
}

// ParseAllow reads HERALD_WEBHOOK_ALLOW: CIDR prefixes, comma-separated
// ("127.0.0.0/8, ::1/128"); a bare address stands for itself alone.
func ParseAllow(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("webhook allow list: %q is not a CIDR prefix or an address", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
