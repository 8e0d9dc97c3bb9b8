package api

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Preferences is the store of users' preferences (issue 35, point 3).
type Preferences interface {
	// Preferences returns a user's preferences (none: an empty set).
	Preferences(ctx context.Context, userID string) (notify.Preferences, error)
	// PutPreferences replaces every preference of a user.
	PutPreferences(ctx context.Context, userID string, p notify.Preferences) error
	// SetPreference records one preference of a user, leaving the others.
	SetPreference(ctx context.Context, userID, category, channel string, allowed bool) error
}

// preferencesFields are the keys a PUT /recipients/{user_id}/preferences
// body may hold.
var preferencesFields = map[string]bool{"categories": true}

// preferencesBody is a PUT /recipients/{user_id}/preferences body: by
// category, then by channel, whether the user takes it. A PUT replaces
// every preference of the user.
type preferencesBody struct {
	Categories map[string]map[string]*bool `json:"categories"`
}

// PreferencesView is a user's preferences as the API shows them, with
// the categories no one may opt out of.
type PreferencesView struct {
	UserID     string                     `json:"user_id"`
	Categories map[string]map[string]bool `json:"categories"`
	Required   []string                   `json:"required_categories"`
}

func (a *API) preferencesView(userID string, p notify.Preferences) PreferencesView {
	if p == nil {
		p = notify.Preferences{}
	}
	req := a.cfg.RequiredCategories
	if req == nil {
		req = []string{}
	}
	return PreferencesView{UserID: userID, Categories: p, Required: req}
}

// requiredCategory reports whether no user may opt out of category.
func (a *API) requiredCategory(category string) bool {
	return slices.Contains(a.cfg.RequiredCategories, category)
}

// getPreferences handles GET /recipients/{user_id}/preferences: a user
// with none has an empty set (every category allowed), not a 404.
func (a *API) getPreferences(w http.ResponseWriter, r *http.Request) {
	id, e := userIDParam(r)
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	p, err := a.cfg.Preferences.Preferences(r.Context(), id)
	if err != nil {
		a.unavailable(w, r, "get preferences", err)
		return
	}
	writeJSON(w, http.StatusOK, a.preferencesView(id, p))
}

// putPreferences handles PUT /recipients/{user_id}/preferences.
func (a *API) putPreferences(w http.ResponseWriter, r *http.Request) {
	id, e := userIDParam(r)
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	var b preferencesBody
	if e, status := a.readStrict(w, r, preferencesFields, &b); e != nil {
		writeError(w, status, *e)
		return
	}
	if b.Categories == nil {
		writeError(w, http.StatusBadRequest, *invalidField("categories", "is required: an object of categories, each an object of channels to true or false"))
		return
	}
	p := notify.Preferences{}
	for _, cat := range slices.Sorted(maps.Keys(b.Categories)) {
		chs := b.Categories[cat]
		if !notify.ValidCategory(cat) {
			writeError(w, http.StatusBadRequest, *invalidField("categories", fmt.Sprintf("has %q, which is not a category name: 1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit", clip(cat, maxEchoLen))))
			return
		}
		if chs == nil {
			writeError(w, http.StatusBadRequest, *invalidField("categories", fmt.Sprintf("%q must be an object of channels to true or false", cat)))
			return
		}
		p[cat] = map[string]bool{}
		for _, ch := range slices.Sorted(maps.Keys(chs)) {
			allowed := chs[ch]
			if allowed == nil {
				writeError(w, http.StatusBadRequest, *invalidField("categories", fmt.Sprintf("%q.%q must be true or false", cat, clip(ch, maxEchoLen))))
				return
			}
			if _, ok := a.cfg.KnownChannels[ch]; !ok {
				writeError(w, http.StatusUnprocessableEntity, *unprocessable("categories",
					fmt.Sprintf("category %q names channel %q, which herald does not know (%s)", cat, clip(ch, maxEchoLen), strings.Join(a.cfg.KnownChannels.Names(), ", "))))
				return
			}
			if !*allowed && a.requiredCategory(cat) {
				writeError(w, http.StatusUnprocessableEntity, apiError{Code: "required_category", Field: "categories",
					Message: fmt.Sprintf("category %q is required (HERALD_REQUIRED_CATEGORIES): it cannot be opted out of", cat)})
				return
			}
			p[cat][ch] = *allowed
		}
	}
	if err := a.cfg.Preferences.PutPreferences(r.Context(), id, p); err != nil {
		a.unavailable(w, r, "put preferences", err)
		return
	}
	writeJSON(w, http.StatusOK, a.preferencesView(id, p))
}

// linkFields are the keys a POST /recipients/{user_id}/preferences/links
// body may hold.
var linkFields = map[string]bool{"category": true, "channel": true}

// PreferenceLinkView is a signed preference link: following it (a POST,
// or the form its GET shows) opts the user out of the category on the
// channel, without a login.
type PreferenceLinkView struct {
	URL       string `json:"url"`
	ExpiresAt string `json:"expires_at"`
}

// errLinksOff is the answer of every link route while HERALD_LINK_SECRET
// is unset.
var errLinksOff = apiError{Code: "links_off", Message: "preference links are off on this server: HERALD_LINK_SECRET is not set"}

// createPreferenceLink handles POST /recipients/{user_id}/preferences/links.
func (a *API) createPreferenceLink(w http.ResponseWriter, r *http.Request) {
	id, e := userIDParam(r)
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	var b struct {
		Category string `json:"category"`
		Channel  string `json:"channel"`
	}
	if e, status := a.readStrict(w, r, linkFields, &b); e != nil {
		writeError(w, status, *e)
		return
	}
	if !notify.ValidCategory(b.Category) {
		writeError(w, http.StatusBadRequest, *invalidField("category", "must be 1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit"))
		return
	}
	if _, ok := a.cfg.KnownChannels[b.Channel]; !ok {
		writeError(w, http.StatusUnprocessableEntity, *unprocessable("channel", fmt.Sprintf("channel %q is not one herald knows (%s)", clip(b.Channel, maxEchoLen), strings.Join(a.cfg.KnownChannels.Names(), ", "))))
		return
	}
	if a.requiredCategory(b.Category) {
		writeError(w, http.StatusUnprocessableEntity, apiError{Code: "required_category", Field: "category",
			Message: fmt.Sprintf("category %q is required (HERALD_REQUIRED_CATEGORIES): it cannot be opted out of", b.Category)})
		return
	}
	if len(a.cfg.LinkSecret) == 0 {
		writeError(w, http.StatusNotFound, errLinksOff)
		return
	}
	l := notify.PreferenceLink{UserID: id, Category: b.Category, Channel: b.Channel, Expires: time.Now().Add(notify.PreferenceLinkTTL).Truncate(time.Second)}
	writeJSON(w, http.StatusCreated, PreferenceLinkView{URL: a.UnsubscribeURL(l), ExpiresAt: formatTime(l.Expires)})
}

// UnsubscribeURL is the signed URL that opts l's user out of l's
// category on l's channel: under Config.PublicURL when set, a path
// otherwise; "" when links are off (no Config.LinkSecret).
func (a *API) UnsubscribeURL(l notify.PreferenceLink) string {
	if len(a.cfg.LinkSecret) == 0 {
		return ""
	}
	return strings.TrimSuffix(a.cfg.PublicURL, "/") + "/unsubscribe/" + notify.SignPreferenceLink(a.cfg.LinkSecret, l)
}

// linkPage is the page the unsubscribe routes answer a person with. Its
// values are escaped by html/template.
var linkPage = template.Must(template.New("link").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta name="robots" content="noindex"><title>{{.Title}}</title></head>
<body><h1>{{.Title}}</h1><p>{{.Text}}</p>
{{- if .Form}}
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">Unsubscribe</button></form>
{{- end}}
</body></html>
`))

// writePage answers status with linkPage. The page loads nothing and may
// not be framed.
func writePage(w http.ResponseWriter, status int, title, text string, form bool) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = linkPage.Execute(w, struct {
		Title, Text string
		Form        bool
	}{title, text, form})
}

// link checks the {token} of an unsubscribe route and, when it is not
// good, answers the page that says why and reports false: links off
// (404), a bad or expired signature (403), a category made required since
// the link was made (422).
func (a *API) link(w http.ResponseWriter, r *http.Request) (notify.PreferenceLink, bool) {
	if len(a.cfg.LinkSecret) == 0 {
		writePage(w, http.StatusNotFound, "Links are off", "Preference links are off on this server (HERALD_LINK_SECRET is not set).", false)
		return notify.PreferenceLink{}, false
	}
	l, err := notify.VerifyPreferenceLink(a.cfg.LinkSecret, r.PathValue("token"), time.Now())
	if err != nil {
		writePage(w, http.StatusForbidden, "Link not valid", "This link is not valid or has expired. Nothing was changed.", false)
		return notify.PreferenceLink{}, false
	}
	if a.requiredCategory(l.Category) {
		writePage(w, http.StatusUnprocessableEntity, "Cannot unsubscribe", "These messages are required and cannot be turned off. Nothing was changed.", false)
		return notify.PreferenceLink{}, false
	}
	return l, true
}

// showUnsubscribe handles GET /unsubscribe/{token}: a page that asks to
// confirm with a POST. A GET changes nothing, as link scanners and
// prefetchers follow links that no person clicked (RFC 8058, section 1).
func (a *API) showUnsubscribe(w http.ResponseWriter, r *http.Request) {
	l, ok := a.link(w, r)
	if !ok {
		return
	}
	writePage(w, http.StatusOK, "Unsubscribe",
		fmt.Sprintf("Stop receiving %q messages by %s?", l.Category, l.Channel), true)
}

// maxUnsubscribeBody bounds what an unsubscribe POST's body is read to:
// RFC 8058's is "List-Unsubscribe=One-Click".
const maxUnsubscribeBody = 4 << 10

// unsubscribe handles POST /unsubscribe/{token}: the one-click POST of
// RFC 8058 (body List-Unsubscribe=One-Click) or the form of the GET's
// page. It records the opt-out of the link's user from its category on its
// channel, and answers 200 again for a link already used. No token is
// needed: the link's signature is the authority, and neither the token
// nor the user is logged.
func (a *API) unsubscribe(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, maxUnsubscribeBody))
	l, ok := a.link(w, r)
	if !ok {
		return
	}
	if err := a.cfg.Preferences.SetPreference(r.Context(), l.UserID, l.Category, l.Channel, false); err != nil {
		// Logged by route, not by path: the path holds the token.
		a.log.ErrorContext(r.Context(), "unsubscribe failed", "route", "POST /unsubscribe/{token}", "err", err)
		w.Header().Set("Retry-After", "1")
		writePage(w, http.StatusServiceUnavailable, "Try again", "The service is temporarily unavailable; nothing was changed. Please try again.", false)
		return
	}
	writePage(w, http.StatusOK, "Unsubscribed",
		fmt.Sprintf("You will no longer receive %q messages by %s.", l.Category, l.Channel), false)
}
