package webhook

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// The SSRF guard decides, for every address a webhook would reach, whether
// it may go there: at create (a literal address in "to") and on every
// connection dialled (after DNS, so a name that resolves or re-resolves to
// a refused address cannot pass). Its rules are reviewed against IANA's
// IPv4 and IPv6 Special-Purpose Address Registries: every range in them is
// refused, for none holds a webhook receiver (the few marked globally
// reachable are anycast services, AS112, AMT, PCP, TURN, which reach the
// nearest instance, often the operator's own network, or identifiers that
// are not routed), but the two that stand for an IPv4 address, IPv4-mapped
// and the well-known NAT64 prefix, which are judged as the IPv4 address
// they carry. Multicast, 240/4, site-local, the IPv4-compatible and
// IPv4-translated forms, and IPv6 outside the global unicast 2000::/3 are
// refused too. docs/design.md holds the same rules as a table, generated
// from guardRules (go test ./internal/sender/webhook -run TestGuardDoc
// -update).

// guardAct is what the guard does with an address in a rule's range.
type guardAct int

const (
	// refuse refuses the address, unless Config.Allow opens it.
	refuse guardAct = iota
	// embeddedIPv4 judges the IPv4 address in the last 32 bits instead.
	embeddedIPv4
)

// guardRule is one range of the guard.
type guardRule struct {
	prefix netip.Prefix
	// what names the range the way IANA's registries do, with its RFC.
	what string
	act  guardAct
	// reason is what a refusal calls the address ("loopback").
	reason string
}

// guardRules are the guard's ranges. The first rule whose range holds an
// address decides; an address no rule holds may be reached.
var guardRules = func() []guardRule {
	var rs []guardRule
	for _, r := range []struct {
		cidr, what string
		act        guardAct
		reason     string
	}{
		// IPv4 Special-Purpose Address Registry, and multicast.
		{"0.0.0.0/8", `"this network", 0.0.0.0 "this host" included (RFC 791, RFC 1122)`, refuse, "unspecified (this network)"},
		{"10.0.0.0/8", "private-use (RFC 1918)", refuse, "private"},
		{"100.64.0.0/10", "shared address space, carrier-grade NAT (RFC 6598)", refuse, "shared (CGNAT)"},
		{"127.0.0.0/8", "loopback (RFC 1122)", refuse, "loopback"},
		{"169.254.0.0/16", "link-local, the cloud metadata service 169.254.169.254 included (RFC 3927)", refuse, "link-local (cloud metadata included)"},
		{"172.16.0.0/12", "private-use (RFC 1918)", refuse, "private"},
		{"192.0.0.0/24", "IETF protocol assignments: DS-Lite, the dummy address, PCP and TURN anycast, NAT64 discovery (RFC 6890, RFC 7335, RFC 7600, RFC 7723, RFC 8155, RFC 8880)", refuse, "IETF protocol assignment"},
		{"192.0.2.0/24", "documentation, TEST-NET-1 (RFC 5737)", refuse, "documentation"},
		{"192.31.196.0/24", "AS112-v4, anycast DNS (RFC 7535)", refuse, "AS112 anycast"},
		{"192.52.193.0/24", "AMT relays, anycast (RFC 7450)", refuse, "AMT anycast"},
		{"192.88.99.0/24", "6to4 relay anycast, deprecated; 6a44 relay included (RFC 7526, RFC 6751)", refuse, "6to4 relay anycast (deprecated)"},
		{"192.168.0.0/16", "private-use (RFC 1918)", refuse, "private"},
		{"192.175.48.0/24", "direct delegation AS112 service, anycast DNS (RFC 7534)", refuse, "AS112 anycast"},
		{"198.18.0.0/15", "benchmarking (RFC 2544)", refuse, "benchmarking"},
		{"198.51.100.0/24", "documentation, TEST-NET-2 (RFC 5737)", refuse, "documentation"},
		{"203.0.113.0/24", "documentation, TEST-NET-3 (RFC 5737)", refuse, "documentation"},
		{"224.0.0.0/4", "multicast (RFC 5771)", refuse, "multicast"},
		{"255.255.255.255/32", "limited broadcast (RFC 919, RFC 8190)", refuse, "broadcast"},
		{"240.0.0.0/4", "reserved (RFC 1112)", refuse, "reserved"},

		// IPv6 Special-Purpose Address Registry, and what IPv6's
		// addressing architecture deprecated or left unassigned.
		{"::/128", "unspecified (RFC 4291)", refuse, "unspecified"},
		{"::1/128", "loopback (RFC 4291)", refuse, "loopback"},
		{"::ffff:0:0/96", "IPv4-mapped, ::ffff:a.b.c.d (RFC 4291)", embeddedIPv4, ""},
		{"::ffff:0:0:0/96", "IPv4-translated, ::ffff:0:a.b.c.d (RFC 2765, obsolete)", refuse, "IPv4-translated (SIIT)"},
		{"::/96", "IPv4-compatible, ::a.b.c.d (deprecated, RFC 4291)", refuse, "IPv4-compatible (deprecated)"},
		{"64:ff9b::/96", "NAT64 well-known prefix (RFC 6052)", embeddedIPv4, ""},
		{"64:ff9b:1::/48", "local-use NAT64 (RFC 8215): the IPv4 address's place depends on the prefix length, unknown here", refuse, "local-use NAT64"},
		{"100::/64", "discard-only (RFC 6666)", refuse, "discard-only"},
		{"100:0:0:1::/64", "dummy prefix (RFC 9780)", refuse, "dummy"},
		{"2001::/32", "Teredo: tunnels to the IPv4 addresses it embeds (RFC 4380)", refuse, "Teredo"},
		{"2001::/23", "IETF protocol assignments: PCP, TURN and DNS-SD anycast, benchmarking, AMT, AS112-v6, ORCHID, ORCHIDv2, drone entity tags (RFC 2928, RFC 7723, RFC 8155, RFC 9665, RFC 5180, RFC 7450, RFC 7535, RFC 4843, RFC 7343, RFC 9374)", refuse, "IETF protocol assignment"},
		{"2001:db8::/32", "documentation (RFC 3849)", refuse, "documentation"},
		{"2002::/16", "6to4: tunnels to the IPv4 address it embeds; deprecated relays (RFC 3056, RFC 7526)", refuse, "6to4"},
		{"2620:4f:8000::/48", "direct delegation AS112 service, anycast DNS (RFC 7534)", refuse, "AS112 anycast"},
		{"3fff::/20", "documentation (RFC 9637)", refuse, "documentation"},
		{"5f00::/16", "segment routing (SRv6) SIDs (RFC 9602)", refuse, "segment routing (SRv6)"},
		{"fc00::/7", "unique local (RFC 4193)", refuse, "private (unique local)"},
		{"fe80::/10", "link-local (RFC 4291)", refuse, "link-local"},
		{"fec0::/10", "site-local, deprecated (RFC 3879)", refuse, "site-local (deprecated)"},
		{"ff00::/8", "multicast (RFC 4291)", refuse, "multicast"},
		{"::/3", "outside global unicast 2000::/3: reserved by the IETF (RFC 4291)", refuse, "reserved"},
		{"4000::/2", "outside global unicast 2000::/3: reserved by the IETF (RFC 4291)", refuse, "reserved"},
		{"8000::/1", "outside global unicast 2000::/3: reserved by the IETF (RFC 4291)", refuse, "reserved"},
	} {
		rs = append(rs, guardRule{netip.MustParsePrefix(r.cidr), r.what, r.act, r.reason})
	}
	return rs
}()

// refusal says why addr is refused, or "" when a webhook may go there.
// allow opens ranges that would be refused (HERALD_WEBHOOK_ALLOW): an
// address is open when allow holds it as written or, for one that carries
// an IPv4 address (IPv4-mapped, NAT64), when allow holds that address.
func refusal(addr netip.Addr, allow []netip.Prefix) string {
	addr = addr.WithZone("")
	for _, p := range allow {
		if p.Contains(addr) {
			return ""
		}
	}
	for _, r := range guardRules {
		if !r.prefix.Contains(addr) {
			continue
		}
		if r.act == embeddedIPv4 {
			b := addr.As16()
			return refusal(netip.AddrFrom4([4]byte(b[12:])), allow)
		}
		return r.reason
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
	return fmt.Sprintf("destination %s refused: %s address (%s)", e.Addr, e.Reason, allowHint(e.Addr))
}

// allowHint says how to open addr on purpose: HERALD_WEBHOOK_ALLOW with
// that address alone (the narrowest range that does; a wider one is the
// operator's choice), for a test's receiver or an internal endpoint the
// operator trusts. The guard stays as it is for everything else.
func allowHint(addr netip.Addr) string {
	addr = addr.WithZone("")
	return fmt.Sprintf("to send to it on purpose, for tests or an internal endpoint you trust, "+
		"set HERALD_WEBHOOK_ALLOW=%s on the API and the workers", netip.PrefixFrom(addr, addr.BitLen()))
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
