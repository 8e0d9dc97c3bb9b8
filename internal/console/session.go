package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The cookies of the console: both HttpOnly (no script reads them) and
// SameSite=Strict (no other site's page sends them), and Secure when the
// console is served over TLS.
const (
	sessionCookie = "herald_session"
	csrfCookie    = "herald_csrf"
	csrfField     = "csrf"
)

// sessionState is what a request's session cookie says.
type sessionState int

const (
	sessionNone sessionState = iota
	sessionValid
	sessionExpired
)

// sign is the HMAC-SHA256 of the parts under the console's key.
func (c *Console) sign(parts ...string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

func randomHex() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *Console) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
}

// newSession is a session cookie's value: its expiry, a nonce, and their
// signature. The server keeps no session table, so that any API replica
// holding the same token accepts it.
func (c *Console) newSession(now time.Time) string {
	exp := strconv.FormatInt(now.Add(c.cfg.SessionTTL).Unix(), 10)
	nonce := randomHex()[:32]
	return exp + "." + nonce + "." + c.sign("session", exp, nonce)
}

// session checks the request's session cookie.
func (c *Console) session(r *http.Request) sessionState {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return sessionNone
	}
	parts := strings.Split(ck.Value, ".")
	if len(parts) != 3 {
		return sessionNone
	}
	want := c.sign("session", parts[0], parts[1])
	if subtle.ConstantTimeCompare([]byte(parts[2]), []byte(want)) != 1 {
		return sessionNone
	}
	exp, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return sessionNone
	}
	if time.Now().Unix() >= exp {
		return sessionExpired
	}
	return sessionValid
}

// authed lets a request through when no token is configured or its session
// is valid; otherwise it sends the browser to the login form, saying when
// the session expired.
func (c *Console) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.Token == "" {
			next(w, r)
			return
		}
		switch c.session(r) {
		case sessionValid:
			next(w, r)
			return
		case sessionExpired:
			c.toLogin(w, r, "expired")
		default:
			c.toLogin(w, r, "")
		}
	}
}

// toLogin redirects to the login form. A script's request (the overview's
// refresh) gets 401 instead, and the script moves the page itself.
func (c *Console) toLogin(w http.ResponseWriter, r *http.Request, reason string) {
	u := Prefix + "/login"
	if reason != "" {
		u += "?reason=" + url.QueryEscape(reason)
	}
	if r.Header.Get("X-Herald-Console") == "refresh" {
		w.Header().Set("X-Herald-Login", u)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// csrfToken returns the CSRF token to put in the page's forms, setting the
// browser's CSRF cookie first when it has none. With a token configured the
// form's token is the cookie's value signed with the key derived from the
// API token (a signed double submit: a page elsewhere can neither read the
// cookie nor forge the signature); without one, the cookie's value itself.
func (c *Console) csrfToken(w http.ResponseWriter, r *http.Request) string {
	v := ""
	if ck, err := r.Cookie(csrfCookie); err == nil && validNonce(ck.Value) {
		v = ck.Value
	} else {
		v = randomHex()
		http.SetCookie(w, c.cookie(r, csrfCookie, v, 0))
		// The request's own handler may render forms again (an error
		// page): let it see the cookie it just set.
		r.AddCookie(&http.Cookie{Name: csrfCookie, Value: v})
	}
	return c.formToken(v)
}

func (c *Console) formToken(cookie string) string {
	if c.cfg.Token == "" {
		return cookie
	}
	return c.sign("csrf", cookie)
}

func validNonce(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// checkCSRF reports whether a state-changing request carries the CSRF token
// of its browser's cookie, and comes from the console's own origin when the
// browser says where it comes from: the request's Host, and one the
// console answers to (a page on a rebound name sends its own name as both).
func (c *Console) checkCSRF(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host || !c.hosts.Set().AllowsOrigin(o) {
			return false
		}
	}
	ck, err := r.Cookie(csrfCookie)
	if err != nil || !validNonce(ck.Value) {
		return false
	}
	got := r.PostFormValue(csrfField)
	want := c.formToken(ck.Value)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// tokenMatches compares SHA-256 digests in constant time, so that neither
// the token's content nor its length leaks through timing.
func (c *Console) tokenMatches(got string) bool {
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256([]byte(c.cfg.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// loginReasons are the messages the login form shows; the reason parameter
// only picks one of them, so that nothing of the URL is shown.
var loginReasons = map[string]string{
	"expired":    "Your session expired. Log in again.",
	"logged_out": "You are logged out.",
}

type loginData struct {
	Notice string
	Error  string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Token == "" || c.session(r) == sessionValid {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", loginData{Notice: loginReasons[r.URL.Query().Get("reason")]})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Token == "" {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if !c.checkCSRF(r) {
		c.render(w, r, http.StatusForbidden, "login", loginData{Error: csrfMessage})
		return
	}
	turn, wait, limit := c.logins.take(r)
	if wait > 0 {
		secs := retryAfterSeconds(wait)
		c.logins.logThrottled(c.log, r, limit, secs)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		msg := fmt.Sprintf("Too many failed logins from your address. Try again in %d seconds.", secs)
		if limit == "global" {
			msg = fmt.Sprintf("Too many failed logins to this console. Try again in %d seconds.", secs)
		}
		c.render(w, r, http.StatusTooManyRequests, "login", loginData{Error: msg})
		return
	}
	if !c.tokenMatches(r.PostFormValue("token")) {
		c.logins.failed.Inc()
		c.render(w, r, http.StatusUnauthorized, "login", loginData{Error: "That is not the API token."})
		return
	}
	turn.giveBack()
	http.SetCookie(w, c.cookie(r, sessionCookie, c.newSession(time.Now()), int(c.cfg.SessionTTL/time.Second)))
	// A fresh CSRF cookie at login: one planted before it is not reused.
	http.SetCookie(w, c.cookie(r, csrfCookie, randomHex(), 0))
	http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if !c.checkCSRF(r) {
		c.forbidden(w, r)
		return
	}
	http.SetCookie(w, c.cookie(r, sessionCookie, "", -1))
	http.Redirect(w, r, Prefix+"/login?reason=logged_out", http.StatusSeeOther)
}

// retryAfterSeconds is d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// csrfMessage is what a refused form says.
const csrfMessage = "The form's security token is missing or stale (refused as a possible cross-site request). Reload the page and try again."

// maxFormBytes bounds a form's body.
const maxFormBytes = 1 << 20

func (c *Console) forbidden(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusForbidden, "error", errorPage{Title: "Refused", Message: csrfMessage})
}

// acceptForm takes a form post that changes something: its body bounded
// and parsed, its CSRF token checked (checkCSRF). It answers 403 and
// reports false when either fails.
func (c *Console) acceptForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil || !c.checkCSRF(r) {
		c.forbidden(w, r)
		return false
	}
	return true
}
