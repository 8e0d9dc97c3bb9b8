package webhook

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/heraldhq/herald/internal/notify"
)

// Limits on a webhook request, in bytes.
const (
	// MaxURLLen bounds the destination URL.
	MaxURLLen = 2048
	// MaxBodyLen bounds the JSON body, as for every channel.
	MaxBodyLen = notify.MaxBodyLen
)

// Validate checks the webhook fields of a create request: to is an
// absolute http(s) URL with a host and no userinfo, not a literal address
// in a refused range (see Config.Allow), nor an IPv4 address spelt any
// other way than four decimal numbers (2130706433, 0x7f000001, 127.1,
// 127.0.0.1.); body is one JSON value; subject is empty. It returns a *notify.FieldError, or nil. It does no I/O: a
// name is checked on the address it resolves to when the webhook is sent.
func Validate(r notify.CreateRequest) error {
	return ValidateAllowing(r, nil)
}

// ValidateAllowing is Validate with the ranges in allow opened
// (HERALD_WEBHOOK_ALLOW), so that a literal address the sender would
// reach is accepted at create too.
func ValidateAllowing(r notify.CreateRequest, allow []netip.Prefix) error {
	if _, err := parseURL(r.To, allow); err != nil {
		return err
	}
	if r.Subject != "" {
		return &notify.FieldError{Field: "subject", Message: "must be empty for a webhook: the body is the whole payload"}
	}
	switch {
	case strings.TrimSpace(r.Body) == "":
		return &notify.FieldError{Field: "body", Message: "is required"}
	case len(r.Body) > MaxBodyLen:
		return &notify.FieldError{Field: "body", Message: "is too long"}
	case !utf8.ValidString(r.Body):
		return &notify.FieldError{Field: "body", Message: "is not valid UTF-8"}
	case !json.Valid([]byte(r.Body)):
		return &notify.FieldError{Field: "body", Message: "must be a JSON value"}
	}
	return nil
}

// parseURL checks a webhook destination and returns it parsed. Its errors
// are *notify.FieldError on "to".
func parseURL(to string, allow []netip.Prefix) (*url.URL, error) {
	bad := func(msg string) error { return &notify.FieldError{Field: "to", Message: msg} }
	switch {
	case strings.TrimSpace(to) == "":
		return nil, bad("is required")
	case len(to) > MaxURLLen:
		return nil, bad("is too long")
	case !utf8.ValidString(to):
		return nil, bad("is not valid UTF-8")
	}
	for _, c := range to {
		if c <= ' ' || c == 0x7f {
			return nil, bad("must not contain spaces or control characters")
		}
	}
	u, err := url.Parse(to)
	if err != nil {
		return nil, bad("must be an absolute http(s) URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("must be an absolute http(s) URL")
	case u.Opaque != "":
		return nil, bad("must be an absolute http(s) URL")
	case u.User != nil:
		return nil, bad("must not contain credentials (user:password@)")
	case u.Hostname() == "":
		return nil, bad("must name a host")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, bad("has an invalid port")
		}
	}
	host := u.Hostname()
	if strings.Contains(host, "%") {
		return nil, bad("must not name an IPv6 zone")
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if reason := refusal(addr, allow); reason != "" {
			return nil, bad("is an address webhooks are not sent to: " + reason + " (" + allowHint(addr) + ")")
		}
		return u, nil
	}
	// A host that is not an address as written may still be one: the
	// legacy IPv4 spellings (2130706433, 0x7f000001, 0177.0.0.1, 127.1,
	// 127.0.0.1.) are an address to inet_aton, cgo's resolver and
	// browsers, and a name to Go's own resolver, so where they go would
	// depend on the build. They are refused whatever the address, public
	// included: the one spelling taken is four decimal numbers.
	if h := lookupASCII(host); endsInNumber(h) {
		addr, ok := parseIPv4(h)
		if !ok {
			return nil, bad("must name a host: its last label is a number, yet it is not an IPv4 address")
		}
		msg := fmt.Sprintf("spells the IPv4 address %s in a legacy form (a single number, hex, octal, fewer than four parts or a trailing dot): write %s", addr, addr)
		if reason := refusal(addr, allow); reason != "" {
			msg += "; written so, it is still refused: " + reason + " (" + allowHint(addr) + ")"
		}
		return nil, bad(msg)
	}
	return u, nil
}

// lookupASCII is host as net/http dials it: a host that is not ASCII is
// mapped the IDNA way (full-width digits and dots become ASCII ones), a
// host that cannot be mapped is left as it is.
func lookupASCII(host string) string {
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf {
			if h, err := idna.Lookup.ToASCII(host); err == nil {
				return h
			}
			return host
		}
	}
	return host
}

// endsInNumber reports whether host's last label (a trailing dot aside) is
// a number: the WHATWG URL Standard's test for a host that is an IPv4
// address or nothing.
func endsInNumber(host string) bool {
	labels := strings.Split(host, ".")
	if labels[len(labels)-1] == "" {
		if len(labels) == 1 {
			return false
		}
		labels = labels[:len(labels)-1]
	}
	last := labels[len(labels)-1]
	if last != "" && strings.Trim(last, "0123456789") == "" {
		return true
	}
	_, ok := ipv4Number(last)
	return ok
}

// parseIPv4 reads host as the WHATWG URL Standard's IPv4 parser (and
// inet_aton) does: one to four dot-separated numbers, each decimal, octal
// (a leading 0) or hex (0x), the last filling the bytes left, and a
// trailing dot allowed.
func parseIPv4(host string) (netip.Addr, bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	for i, p := range parts {
		n, ok := ipv4Number(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(5-len(parts))) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// ipv4Number reads one part of a legacy IPv4 address: decimal, octal after
// a leading 0, hex after 0x; "0x" alone is 0. A number too large for 64
// bits is read as the largest, which no part may be.
func ipv4Number(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	base := 10
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		base, s = 16, s[2:]
	case len(s) >= 2 && s[0] == '0':
		base, s = 8, s[1:]
	}
	if s == "" {
		return 0, true
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d int
		switch {
		case '0' <= c && c <= '9':
			d = int(c - '0')
		case 'a' <= c && c <= 'f':
			d = int(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = int(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		return math.MaxUint64, true
	}
	return n, true
}

// destination is the key of u's endpoint: scheme://host:port, the port
// made explicit, so that one endpoint's outage pauses only its deliveries.
func destination(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	host := strings.ToLower(u.Hostname())
	if addr, err := netip.ParseAddr(host); err == nil {
		host = addr.String()
	}
	return u.Scheme + "://" + joinHostPort(host, port)
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}
