package main

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// This file keeps secrets out of what herald prints: a connection string in
// any of the forms its settings take (a URL with userinfo, several URLs or
// hosts separated by commas, a key=value DSN, a password in a query), and
// the values of secret settings wherever they turn up in an error or a log.

// masked replaces a secret.
const masked = "xxxxx"

// redact masks every secret of one setting's value, keeping what an
// operator needs to see (scheme, user, hosts, path, the other parameters).
// A value in no known form is returned as it is.
func redact(raw string) string {
	if !strings.Contains(raw, "://") {
		return redactPairs(raw)
	}
	parts := splitURLs(raw)
	for i, p := range parts {
		parts[i] = redactURL(p)
	}
	return strings.Join(parts, ",")
}

// urlStartRE finds where a URL begins inside a comma-separated list of
// URLs ("amqp://a,amqp://b"), as opposed to a host list inside one URL
// ("kafka://a:9092,b:9092", "mongodb://a,b/db").
var urlStartRE = regexp.MustCompile(`,\s*[A-Za-z][A-Za-z0-9+.-]*://`)

// splitURLs splits a comma-separated list of URLs, each with its scheme.
func splitURLs(raw string) []string {
	var out []string
	for {
		loc := urlStartRE.FindStringIndex(raw)
		if loc == nil {
			return append(out, raw)
		}
		out = append(out, raw[:loc[0]])
		raw = strings.TrimLeft(raw[loc[0]+1:], " ")
	}
}

// redactURL masks the password of one URL's userinfo (the token, for
// nats://TOKEN@host) and its password-like query parameters. The userinfo
// ends at the last '@' (a password may hold '@', '/', '?' or ':'): a '@'
// in a query value masks more than it must, never less.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo, after := rest[:at], rest[at+1:]
		user, _, hasPass := strings.Cut(userinfo, ":")
		switch {
		case hasPass:
			userinfo = user + ":" + masked
		case tokenScheme(scheme):
			userinfo = masked
		}
		rest = userinfo + "@" + after
	}
	head, query, hasQuery := strings.Cut(rest[strings.LastIndex(rest, "@")+1:], "?")
	if hasQuery {
		rest = rest[:strings.LastIndex(rest, "@")+1] + head + "?" + redactQuery(query)
	}
	return scheme + "://" + rest
}

// tokenScheme reports whether a userinfo without ':' is a secret token
// (NATS token authentication) rather than a user name.
func tokenScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "nats", "tls", "ws", "wss":
		return true
	}
	return false
}

// redactQuery masks the values of a query's secret parameters.
func redactQuery(query string) string {
	params := strings.Split(query, "&")
	for i, p := range params {
		if k, _, hasValue := strings.Cut(p, "="); hasValue && secretKey(k) {
			params[i] = k + "=" + masked
		}
	}
	return strings.Join(params, "&")
}

// secretKey reports whether a parameter (of a query or a key=value DSN)
// holds a secret.
func secretKey(k string) bool {
	k = strings.ToLower(strings.TrimSpace(k))
	if dec, err := url.QueryUnescape(k); err == nil {
		k = dec
	}
	for _, s := range []string{"password", "passwd", "secret", "token", "apikey", "api_key", "signature", "credential"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	switch k {
	case "pass", "pwd", "sig", "auth", "authmechanismproperties":
		return true
	}
	return false
}

// pairRE finds key=value pairs: a key=value DSN ("host=db password=x"), an
// ADO-style one ("Password=x;"), or pairs inside any text. A value may be
// quoted with ' or " (backslash escapes inside).
var pairRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_.%-]*)\s*=\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s;&,'"]*)`)

// redactPairs masks the values of the secret keys among the key=value
// pairs of s.
func redactPairs(s string) string {
	return replacePairs(s, func(key, value string) string {
		if secretKey(key) {
			return masked
		}
		return value
	})
}

// replacePairs rewrites the value of every key=value pair of s.
func replacePairs(s string, value func(key, value string) string) string {
	var b strings.Builder
	last := 0
	for _, m := range pairRE.FindAllStringSubmatchIndex(s, -1) {
		key, v := s[m[2]:m[3]], s[m[4]:m[5]]
		b.WriteString(s[last:m[4]])
		b.WriteString(value(key, v))
		last = m[5]
	}
	b.WriteString(s[last:])
	return b.String()
}

// embeddedURLRE finds URLs with userinfo inside any text (an error that
// quotes the URL it could not parse).
var embeddedURLRE = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'` + "`" + `<>]*@[^\s"'` + "`" + `<>]*`)

// scrubber masks secrets in free text: the URLs and key=value passwords it
// contains, and the secret values herald was configured with wherever they
// appear (an error text quoting a URL that no pattern recognises).
type scrubber struct{ secrets []string }

// newScrubber collects the secrets of values: the whole value of each
// secret setting (and each comma-separated part), and the passwords and
// tokens inside connection strings.
func newScrubber(values []secretSource) scrubber {
	var out []string
	for _, v := range values {
		if v.value == "" {
			continue
		}
		if v.secret {
			out = append(out, v.value)
			for part := range strings.SplitSeq(v.value, ",") {
				out = append(out, strings.TrimSpace(part))
			}
			continue
		}
		out = append(out, secretsIn(v.value)...)
	}
	// A secret shorter than 4 characters would mask ordinary words; the
	// patterns still mask it where it stands in a connection string.
	out = slices.DeleteFunc(out, func(s string) bool { return len(s) < 4 })
	// Longest first: a secret that contains another is masked whole.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return scrubber{secrets: slices.Compact(out)}
}

// secretSource is one setting's text as given, for newScrubber.
type secretSource struct {
	value  string
	secret bool
}

// secretsIn returns the passwords and tokens of one connection string:
// userinfo passwords (as written and unescaped), NATS tokens, secret query
// parameters and key=value passwords. A password equal to its user name
// (guest:guest) is left out: masking it everywhere would mask the user.
func secretsIn(raw string) []string {
	var out []string
	add := func(s string) {
		s = strings.Trim(s, `'"`)
		out = append(out, s)
		if dec, err := url.PathUnescape(s); err == nil && dec != s {
			out = append(out, dec)
		}
	}
	pairs := raw
	if strings.Contains(raw, "://") {
		pairs = ""
		for _, u := range splitURLs(raw) {
			scheme, rest, _ := strings.Cut(u, "://")
			at := strings.LastIndex(rest, "@")
			if at >= 0 {
				user, pass, hasPass := strings.Cut(rest[:at], ":")
				switch {
				case hasPass && pass != user:
					add(pass)
				case !hasPass && tokenScheme(scheme):
					add(user)
				}
			}
			if _, q, ok := strings.Cut(rest[at+1:], "?"); ok {
				pairs += " " + strings.ReplaceAll(q, "&", " ")
			}
		}
	}
	replacePairs(pairs, func(key, value string) string {
		if secretKey(key) && value != "" {
			add(value)
		}
		return value
	})
	return out
}

// text masks the secrets in s.
func (sc scrubber) text(s string) string {
	if strings.Contains(s, "://") {
		s = embeddedURLRE.ReplaceAllStringFunc(s, redactURL)
	}
	if strings.Contains(s, "=") {
		s = redactPairs(s)
	}
	for _, secret := range sc.secrets {
		s = strings.ReplaceAll(s, secret, masked)
	}
	return s
}

// err returns err with the secrets of its text masked; errors.Is and
// errors.As still see the original.
func (sc scrubber) err(err error) error {
	if err == nil {
		return nil
	}
	if t := sc.text(err.Error()); t != err.Error() {
		return scrubbedError{text: t, err: err}
	}
	return err
}

// scrubbedError is an error whose text had secrets masked.
type scrubbedError struct {
	text string
	err  error
}

func (e scrubbedError) Error() string { return e.text }
func (e scrubbedError) Unwrap() error { return e.err }
