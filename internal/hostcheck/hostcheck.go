// Package hostcheck decides which Host headers herald's HTTP listener
// answers: its defence against DNS rebinding.
//
// A web page on a name its author controls can make that name resolve to
// 127.0.0.1 (or any address the visitor's browser reaches) once the page
// has loaded. The browser then sends the page's requests to herald with the
// page's own name as Host, and lets the page read the replies: to the
// browser they are same-origin. Refusing every Host that is not one of
// herald's names ends the attack, whatever the token setting.
//
// Always answered: an IP literal (any address, with or without a port: a
// browser sends one only when the page's own URL names that address, so it
// cannot be rebound), "localhost", and a request with no Host at all (no
// browser sends one). Names are listed: exactly ("herald.example.com"), as
// a suffix (".example.com": that name and every name under it), or "*" (any
// Host: the check is off). Ports are never compared: a rebinding page's URL
// names herald's own port, so the port says nothing about who sent it.
package hostcheck

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Set is the names a listener answers to besides IP literals and
// localhost. The zero value and nil allow no other name.
type Set struct {
	any      bool
	names    map[string]bool
	suffixes []string // each with its leading dot
}

// New parses entries (each "*", a host name, ".suffix" or an IP literal,
// without scheme or port; case does not matter) into a Set. Empty entries
// are skipped.
func New(entries []string) (*Set, error) {
	s := &Set{names: map[string]bool{}}
	var errs []error
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "":
		case e == "*":
			s.any = true
		case strings.HasPrefix(e, "*."):
			errs = append(errs, fmt.Errorf("%q: write %q for %s and every name under it", e, e[1:], e[2:]))
		case strings.HasPrefix(e, "."):
			if !validName(e[1:]) {
				errs = append(errs, fmt.Errorf("%q is not a domain suffix (want .example.com)", e))
				continue
			}
			s.suffixes = append(s.suffixes, e)
		default:
			if _, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				continue // IP literals are always allowed
			}
			name := strings.TrimSuffix(e, ".")
			if !validName(name) {
				errs = append(errs, fmt.Errorf("%q is not a host name (want a name without scheme, port or path, .example.com or *)", e))
				continue
			}
			s.names[name] = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// validName reports whether n is a DNS name: dot-separated labels of
// letters, digits, '-' and '_' (service names in compose files), each 1-63
// characters, 253 in all.
func validName(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for label := range strings.SplitSeq(n, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Any reports whether the set allows every Host ("*").
func (s *Set) Any() bool { return s != nil && s.any }

// Names reports whether the set lists any name (or "*").
func (s *Set) Names() bool { return s != nil && (s.any || len(s.names) > 0 || len(s.suffixes) > 0) }

// Allows reports whether a request whose Host header is host may be
// answered.
func (s *Set) Allows(host string) bool {
	if s.Any() || host == "" {
		return true
	}
	name, ip, ok := split(host)
	if !ok {
		return false
	}
	if ip || name == "localhost" {
		return true
	}
	if s == nil {
		return false
	}
	if s.names[name] {
		return true
	}
	for _, suf := range s.suffixes {
		if name == suf[1:] || strings.HasSuffix(name, suf) {
			return true
		}
	}
	return false
}

// AllowsOrigin reports whether a browser's Origin header names an allowed
// host (its scheme and port are not compared). "null", an empty or an
// unreadable origin is not allowed.
func (s *Set) AllowsOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return s.Allows(u.Host)
}

// split takes a Host header apart: the name (lower case, without port or
// a trailing dot), whether it is an IP literal, and whether it could be
// read at all.
func split(host string) (name string, ip, ok bool) {
	host = strings.ToLower(host)
	if strings.HasPrefix(host, "[") {
		end := strings.IndexByte(host, ']')
		if end < 0 || !validPort(host[end+1:]) {
			return "", false, false
		}
		a, err := netip.ParseAddr(host[1:end])
		return host[1:end], err == nil && a.Is6(), err == nil && a.Is6()
	}
	switch strings.Count(host, ":") {
	case 0:
	case 1:
		var port string
		host, port, _ = strings.Cut(host, ":")
		if !validPort(":" + port) {
			return "", false, false
		}
	default: // a bare IPv6 address, which HTTP wants in brackets
		_, err := netip.ParseAddr(host)
		return host, err == nil, err == nil
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return "", false, false
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return host, true, true
	}
	return host, false, true
}

// validPort reports whether p is empty or ":" followed by digits.
func validPort(p string) bool {
	if p == "" {
		return true
	}
	if p[0] != ':' || len(p) == 1 || len(p) > 6 {
		return false
	}
	for _, c := range p[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Guard refuses requests whose Host a Set does not allow, and logs each
// refusal as a WARN, at most a few every logEvery, so that a page hammering
// herald cannot flood the log; a line says how many refusals went unlogged
// before it.
type Guard struct {
	set        *Set
	log        *slog.Logger
	lim        *rate.Limiter
	suppressed atomic.Int64
}

// logEvery and logBurst bound the refusals logged.
const (
	logEvery = 10 * time.Second
	logBurst = 3
)

// NewGuard returns a Guard over set, logging to log (nil: nowhere).
func NewGuard(set *Set, log *slog.Logger) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{set: set, log: log, lim: rate.NewLimiter(rate.Every(logEvery), logBurst)}
}

// Set is the guard's set.
func (g *Guard) Set() *Set { return g.set }

// Allow reports whether r's Host is allowed, logging a refusal.
func (g *Guard) Allow(r *http.Request) bool {
	if g.set.Allows(r.Host) {
		return true
	}
	if !g.lim.Allow() {
		g.suppressed.Add(1)
		return false
	}
	host := r.Host
	if len(host) > 256 {
		host = host[:256] + "..."
	}
	g.log.WarnContext(r.Context(), "request refused: its Host is not a name of this server (DNS rebinding?); list a proxy's name in HERALD_ALLOWED_HOSTS",
		"host", host, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "suppressed", g.suppressed.Swap(0))
	return false
}
