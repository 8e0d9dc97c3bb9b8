package api

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// HeaderRequestID is the header that names a request: taken from the
// client when it is a valid id, made up otherwise, and echoed in the reply.
const HeaderRequestID = "X-Request-Id"

// newRequestID makes a request id: 16 random bytes in hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// withRequestID names every request: the client's X-Request-Id when it is
// one value and valid (notify.ValidRequestID: at most 128 characters from
// [A-Za-z0-9._:@+=/-]), a fresh id otherwise. An invalid id is replaced,
// not refused: it is the client's aid for tracing, and a proxy that sends
// an odd one should not break the request. The id is set on the reply
// before anything else runs (so every answer, a 401 or a panic's 500
// included, carries it) and travels in the request's context, where the
// API's logger (tracing.NewLogHandler) and the create (into the outbox event,
// hence the delivery's logs) find it.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := ""
		if vs := r.Header.Values(HeaderRequestID); len(vs) == 1 && notify.ValidRequestID(vs[0]) {
			id = vs[0]
		}
		if id == "" {
			id = newRequestID()
		}
		w.Header().Set(HeaderRequestID, id)
		next.ServeHTTP(w, r.WithContext(notify.WithRequestID(r.Context(), id)))
	})
}

// corsMaxAge is how long a browser may cache a preflight's answer.
const corsMaxAge = 10 * time.Minute

// corsAllowHeaders are the request headers a browser may send across
// origins: those the API reads.
var corsAllowHeaders = []string{"Authorization", "Content-Type", headerIdempotencyKey, HeaderRequestID}

// corsExposeHeaders are the reply headers a browser script may read.
var corsExposeHeaders = []string{"Location", "Retry-After", headerReplayed, HeaderRequestID}

// withCORS answers browsers from the allowed origins (Config.CORSOrigins):
// with none (the default) it adds nothing and a preflight is an ordinary
// OPTIONS request (405 on every route). A preflight from an allowed origin
// is answered 204 here, before authentication (a browser sends no
// credentials with it); the real request still needs the token.
func (a *API) withCORS(next http.Handler) http.Handler {
	if len(a.cfg.CORSOrigins) == 0 {
		return next
	}
	anyOrigin := slices.Contains(a.cfg.CORSOrigins, "*")
	methods := func(r *http.Request) []string {
		probe := r.Clone(r.Context())
		probe.Method = r.Header.Get("Access-Control-Request-Method")
		return a.allowed(probe)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		if !anyOrigin && !slices.Contains(a.cfg.CORSOrigins, origin) {
			next.ServeHTTP(w, r) // no CORS headers: the browser refuses the reply
			return
		}
		if anyOrigin {
			h.Set("Access-Control-Allow-Origin", "*")
		} else {
			h.Set("Access-Control-Allow-Origin", origin)
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			allow := methods(r)
			if len(allow) == 0 {
				allow = a.allowed(r) // a method the path does not take: say which it does
			}
			h.Set("Access-Control-Allow-Methods", strings.Join(allow, ", "))
			h.Set("Access-Control-Allow-Headers", strings.Join(corsAllowHeaders, ", "))
			h.Set("Access-Control-Max-Age", strconv.Itoa(int(corsMaxAge.Seconds())))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", strings.Join(corsExposeHeaders, ", "))
		next.ServeHTTP(w, r)
	})
}

// validCORSOrigin reports whether o is "*" or an exact origin:
// scheme://host[:port], no path, no trailing slash.
func validCORSOrigin(o string) bool {
	if o == "*" {
		return true
	}
	scheme, rest, ok := strings.Cut(o, "://")
	if !ok || (scheme != "http" && scheme != "https") || rest == "" {
		return false
	}
	return !strings.ContainsAny(rest, "/?#@ \t*")
}

// withHosts refuses, with 421 Misdirected Request, a request whose Host is
// not one of the API's names (Config.AllowedHosts, IP literals,
// localhost): the defence against DNS rebinding. It runs before CORS and
// authentication, so that such a request learns nothing, not even a
// preflight's answer. 421 rather than 403: the request is not forbidden to
// its sender, it reached a server that does not serve that name (RFC 9110,
// 15.5.20), and a client or proxy that sees it knows to fix the name, not a
// credential. The routes that need no token answer any Host.
func (a *API) withHosts(next http.Handler) http.Handler {
	if a.hosts.Set().Any() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.isOpen(r.URL.Path) || a.hosts.Allow(r) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		host := r.Host
		if len(host) > 256 {
			host = host[:256] + "..."
		}
		writeError(w, http.StatusMisdirectedRequest, apiError{Code: "host_not_allowed",
			Message: "this server does not answer to the Host " + strconv.Quote(host) + " (a name a proxy serves it under must be listed in HERALD_ALLOWED_HOSTS)"})
		_, route := a.route(r)
		a.metrics.observe(route, http.StatusMisdirectedRequest, time.Since(start))
	})
}
