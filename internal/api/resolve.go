package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// maxResolveTries bounds how often a create is resolved again when its
// recipient changed between the look-up and the write.
const maxResolveTries = 3

// resolve completes a decoded create request and puts it in nn (see
// checkCreate): a create without a to takes the address from the user's
// recipient; quiet hours without a time_zone take the recipient's zone; a
// create that names a template gets its subject, body and HTML part
// rendered from it, in the recipient's locale. The answer on failure is
// the error and its status: 400 for a request that is wrong as written,
// 422 for one that names what does not exist (a recipient, an address, a
// template, a locale) or does not render, 503 when the store fails (the
// error's message is then the store's, for the log only).
func (a *API) resolve(ctx context.Context, nn *notify.NewNotification, req notify.CreateRequest) (*apiError, int) {
	if e := a.disabledChannel(req.Channel); e != nil {
		return e, http.StatusBadRequest
	}
	_, known := a.cfg.Channels[req.Channel]
	if !known || notify.CheckText("user_id", req.UserID, notify.MaxUserIDLen) != nil {
		// checkCreate names what is wrong.
		return a.checkResolved(nn, req)
	}
	needAddr := req.To == "" && a.cfg.Recipients != nil
	needZone := req.Quiet != nil && req.Quiet.Location == nil
	asGiven := req
	var rec *notify.Recipient
	if a.cfg.Recipients != nil && (needAddr || needZone || req.Template != "") {
		r, err := readRecipient(ctx, a.cfg.Recipients, req.UserID)
		switch {
		case err == nil:
			rec = &r
		case errors.Is(err, notify.ErrNotFound):
		default:
			return &apiError{Message: err.Error()}, http.StatusServiceUnavailable
		}
	}
	if needAddr {
		if rec == nil {
			return unprocessable("user_id", fmt.Sprintf("user_id %q has no recipient: PUT /recipients/{user_id} first, or give to", req.UserID)), http.StatusUnprocessableEntity
		}
		addr, field := rec.Address(req.Channel), a.cfg.Channels[req.Channel].RecipientField
		if addr == "" {
			msg := fmt.Sprintf("to is required: recipient %q has no %s", req.UserID, field)
			if field == "" {
				msg = fmt.Sprintf("to is required: a recipient has no address for the %s channel", req.Channel)
			}
			return unprocessable("to", msg), http.StatusUnprocessableEntity
		}
		req.To = addr
	}
	if needZone && rec != nil && rec.TimeZone != "" {
		if loc, err := time.LoadLocation(rec.TimeZone); err == nil {
			q := *req.Quiet
			q.Location = loc
			req.Quiet = &q
		}
	}
	if req.Template != "" {
		locale := ""
		if rec != nil {
			locale = rec.Locale
		}
		out, tv, e, status := a.render(ctx, req.Template, req.TemplateVersion, req.Channel, locale, []byte(req.Data), "template")
		if e != nil {
			return e, status
		}
		req.Subject, req.Body, req.HTML = out.Subject, out.Text, out.HTML
		req.TemplateVersion, req.Locale = tv.Version, tv.Locale
	}
	if rec != nil {
		nn.RecipientRevision = rec.Revision
	}
	if req.Category != "" && a.cfg.Preferences != nil && !a.requiredCategory(req.Category) {
		nn.CheckPreference = true
		if req.Channel == notify.ChannelEmail && a.cfg.PublicURL != "" {
			// RFC 8058's List-Unsubscribe, rendered now and stored, so
			// that the outbox holds what is sent. Without a public URL
			// there is no absolute URL to give: no header.
			req.Unsubscribe = a.UnsubscribeURL(notify.PreferenceLink{UserID: req.UserID, Category: req.Category,
				Channel: req.Channel, Expires: time.Now().Add(notify.PreferenceLinkTTL).Truncate(time.Second)})
		}
	}
	if rec != nil || req.Template != "" || asGiven.To != req.To {
		nn.Digest = requestDigest(asGiven)
	}
	return a.checkResolved(nn, req)
}

// checkResolved is checkCreate on a resolved request: a field the
// template rendered that the channel refuses is the template's fault
// (422), not the client's request's.
func (a *API) checkResolved(nn *notify.NewNotification, req notify.CreateRequest) (*apiError, int) {
	e := a.checkCreate(nn, req)
	if e == nil {
		return nil, 0
	}
	if req.Template != "" && (e.Field == "subject" || e.Field == "body") {
		part := map[string]string{"subject": "subject", "body": "text"}[e.Field]
		return &apiError{Code: "template_error", Field: "template",
			Message: fmt.Sprintf("template %q version %d (%s, locale %q) renders a %s the %s channel refuses: %s",
				req.Template, req.TemplateVersion, req.Channel, req.Locale, part, req.Channel, e.Message)}, http.StatusUnprocessableEntity
	}
	return e, http.StatusBadRequest
}

func unprocessable(field, msg string) *apiError {
	return &apiError{Code: "unprocessable", Message: msg, Field: field}
}

// requestDigest is the digest an idempotent replay of a resolved create
// compares (notify.NewNotification.Digest): the fields as the client
// gave them, before any look-up, so that a retry matches its first try
// whatever the recipient or the template became.
func requestDigest(r notify.CreateRequest) string {
	var data any
	if len(r.Data) > 0 {
		dec := json.NewDecoder(strings.NewReader(r.Data))
		dec.UseNumber()
		_ = dec.Decode(&data)
	}
	// Maps marshal with sorted keys: the same data in another key order
	// has the same digest.
	// Category is left out when empty: the digests of creates without
	// one stay what they were before categories.
	b, _ := json.Marshal(struct {
		To, Subject, Body, Template string
		Version                     int
		Data                        any
		Category                    string   `json:",omitempty"`
		Channels                    []string `json:",omitempty"`
	}{r.To, r.Subject, r.Body, r.Template, r.TemplateVersion, data, r.Category, r.Channels})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// render renders the template name (as of version pin, 0 for its newest)
// for channel in locale's best variant with data (a JSON object, or
// empty). localeField is the request field a missing locale is reported
// on.
func (a *API) render(ctx context.Context, name string, pin int, channel, locale string, data []byte, localeField string) (notify.Rendered, notify.TemplateVersion, *apiError, int) {
	fail := func(e *apiError, status int) (notify.Rendered, notify.TemplateVersion, *apiError, int) {
		return notify.Rendered{}, notify.TemplateVersion{}, e, status
	}
	if a.cfg.Templates == nil {
		return fail(unprocessable("template", "this server keeps no templates"), http.StatusUnprocessableEntity)
	}
	tpl, err := readTemplate(ctx, a.cfg.Templates, name, pin)
	if errors.Is(err, notify.ErrNotFound) {
		return fail(unprocessable("template", fmt.Sprintf("unknown template %q", name)), http.StatusUnprocessableEntity)
	}
	if err != nil {
		return fail(&apiError{Message: err.Error()}, http.StatusServiceUnavailable)
	}
	if pin > tpl.Latest {
		return fail(unprocessable("template_version", fmt.Sprintf("template %q has no version %d (its latest is %d)", name, pin, tpl.Latest)), http.StatusUnprocessableEntity)
	}
	tv, ok := notify.PickTemplate(tpl.Variants, channel, notify.LocaleCandidates(locale))
	if !ok {
		if _, any := notify.PickTemplate(tpl.Variants, channel, localesOf(tpl.Variants)); !any {
			return fail(unprocessable("template", fmt.Sprintf("template %q has no %s variant", name, channel)), http.StatusUnprocessableEntity)
		}
		return fail(unprocessable(localeField, fmt.Sprintf("template %q has no %s variant in locale %q nor in the default locale \"\"", name, channel, locale)), http.StatusUnprocessableEntity)
	}
	c, err := a.compiled(tv)
	if err != nil {
		return fail(templateFailure(tv, err), http.StatusUnprocessableEntity)
	}
	var m map[string]any
	if len(data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return fail(invalidField("data", "must be a JSON object"), http.StatusBadRequest)
		}
	}
	out, err := c.Render(m)
	if err != nil {
		return fail(templateFailure(tv, err), http.StatusUnprocessableEntity)
	}
	return out, tv, nil, 0
}

// localesOf lists the locales of variants.
func localesOf(vs []notify.TemplateVersion) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Locale
	}
	return out
}

// templateFailure is the 422 of a template that does not parse or render:
// which template, version and variant, which part and line, and the
// variable missing from data.
func templateFailure(tv notify.TemplateVersion, err error) *apiError {
	field, msg := "template", err.Error()
	if te, ok := errors.AsType[*notify.TemplateError](err); ok {
		field = te.Field()
	}
	return &apiError{Code: "template_error", Field: field,
		Message: fmt.Sprintf("template %q version %d (%s, locale %q): %s", tv.Name, tv.Version, tv.Channel, tv.Locale, msg)}
}

// compiledCap bounds the cache of parsed template versions.
const compiledCap = 1024

// templateCache holds parsed template versions: a version never changes,
// so one parse serves every create that renders it.
type templateCache struct {
	mu sync.Mutex
	m  map[string]*notify.CompiledTemplate
}

// compiled returns tv parsed, from the cache when it was parsed before.
func (a *API) compiled(tv notify.TemplateVersion) (*notify.CompiledTemplate, error) {
	key := tv.Name + "\x00" + strconv.Itoa(tv.Version)
	c := &a.templates
	c.mu.Lock()
	got, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return got, nil
	}
	got, err := notify.Compile(tv)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= compiledCap {
		c.m = make(map[string]*notify.CompiledTemplate)
	}
	c.m[key] = got
	c.mu.Unlock()
	return got, nil
}
