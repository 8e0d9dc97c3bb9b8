package webhook

import (
	"encoding/json"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

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
// in a refused range (see Config.Allow); body is one JSON value; subject
// is empty. It returns a *notify.FieldError, or nil. It does no I/O: a
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
			return nil, bad("is a " + reason + " address, which webhooks are not sent to")
		}
	}
	return u, nil
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
