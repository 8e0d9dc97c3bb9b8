package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/heraldhq/herald/internal/notify"
)

// Templates keeps template versions (issue 35, point 2). The stores
// implement it.
type Templates interface {
	// PutTemplate stores v as its template's next version and returns it
	// with its number and creation time.
	PutTemplate(ctx context.Context, v notify.TemplateVersion) (notify.TemplateVersion, error)
	// Template returns a template as of a version (0: its newest), or
	// notify.ErrNotFound.
	Template(ctx context.Context, name string, version int) (notify.Template, error)
	// Templates returns every template as of its newest version.
	Templates(ctx context.Context) ([]notify.Template, error)
}

var templateFields = map[string]bool{"channel": true, "locale": true, "subject": true, "text": true, "html": true}

// templateBody is a PUT /templates/{name} body: one channel and locale's
// parts.
type templateBody struct {
	Channel string `json:"channel"`
	Locale  string `json:"locale"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	HTML    string `json:"html"`
}

var previewFields = map[string]bool{"locale": true, "data": true, "channel": true, "template_version": true}

// previewBody is a POST /templates/{name}/preview body: the locale to
// render in (the variant chosen as for a recipient with that locale), the
// data, and, when the template has variants for several channels, the
// channel; template_version pins a version as a create does.
type previewBody struct {
	Locale          string          `json:"locale"`
	Data            json.RawMessage `json:"data"`
	Channel         string          `json:"channel"`
	TemplateVersion int             `json:"template_version"`
}

// TemplateVariantView is one variant of a template as the API shows it.
type TemplateVariantView struct {
	Channel   string `json:"channel"`
	Locale    string `json:"locale"`
	Version   int    `json:"version"`
	Subject   string `json:"subject,omitempty"`
	Text      string `json:"text"`
	HTML      string `json:"html,omitempty"`
	CreatedAt string `json:"created_at"`
}

// TemplateView is a template as of a version: its variants then.
type TemplateView struct {
	Name string `json:"name"`
	// LatestVersion is the template's newest version number.
	LatestVersion int                   `json:"latest_version"`
	Variants      []TemplateVariantView `json:"variants"`
}

// TemplateVersionView answers a PUT: the version it made.
type TemplateVersionView struct {
	Name string `json:"name"`
	TemplateVariantView
}

// PreviewView answers a preview: what a create would store.
type PreviewView struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	Channel string `json:"channel"`
	// Locale is the variant's locale ("" for the default one).
	Locale  string `json:"locale"`
	Subject string `json:"subject,omitempty"`
	Text    string `json:"text"`
	HTML    string `json:"html,omitempty"`
}

func newVariantView(v notify.TemplateVersion) TemplateVariantView {
	return TemplateVariantView{Channel: v.Channel, Locale: v.Locale, Version: v.Version, Subject: v.Subject, Text: v.Text, HTML: v.HTML,
		CreatedAt: formatTime(v.CreatedAt)}
}

// NewTemplateView renders t.
func NewTemplateView(t notify.Template) TemplateView {
	return TemplateView{Name: t.Name, LatestVersion: t.Latest, Variants: viewsOf(t.Variants, newVariantView)}
}

// TemplateList answers GET /templates.
type TemplateList struct {
	Items []TemplateView `json:"items"`
}

var errNoTemplate = apiError{Code: "not_found", Message: "no such template"}

// putTemplate handles PUT /templates/{name}: a new version.
func (a *API) putTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !notify.ValidTemplateName(name) {
		writeError(w, http.StatusBadRequest, *invalidField("name", "must be 1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit"))
		return
	}
	var b templateBody
	if e, status := a.readStrict(w, r, templateFields, &b); e != nil {
		writeError(w, status, *e)
		return
	}
	v := notify.TemplateVersion{Name: name, Channel: b.Channel, Locale: b.Locale, Subject: b.Subject, Text: b.Text, HTML: b.HTML}
	if e, status := a.checkTemplate(v); e != nil {
		writeError(w, status, *e)
		return
	}
	put, err := a.cfg.Templates.PutTemplate(r.Context(), v)
	if err != nil {
		a.unavailable(w, r, "put template", err)
		return
	}
	w.Header().Set("Location", "/templates/"+name+"?version="+strconv.Itoa(put.Version))
	writeJSON(w, http.StatusCreated, TemplateVersionView{Name: name, TemplateVariantView: newVariantView(put)})
}

// checkTemplate checks a template version: a channel herald knows, a
// locale's shape, the parts the channel has (email: subject and text
// required, html optional; the others: text only), and that every part
// parses (a parse error is 422, naming the part and line).
func (a *API) checkTemplate(v notify.TemplateVersion) (*apiError, int) {
	spec, ok := a.cfg.KnownChannels[v.Channel]
	if !ok {
		if v.Channel == "" {
			return invalidField("channel", "is required"), http.StatusBadRequest
		}
		return invalidField("channel", "must be one of "+quoteAll(a.cfg.KnownChannels.Names())), http.StatusBadRequest
	}
	if !notify.ValidLocale(v.Locale) {
		return invalidField("locale", "must be \"\" (the default variant) or a BCP 47 language tag such as de or pt-BR"), http.StatusBadRequest
	}
	if spec.Subject {
		if err := notify.CheckText("subject", v.Subject, notify.MaxSubjectLen); err != nil {
			return invalidField("subject", fieldMessage(err)), http.StatusBadRequest
		}
	} else {
		if v.Subject != "" {
			return invalidField("subject", "must be absent: the "+v.Channel+" channel has no subject"), http.StatusBadRequest
		}
		if v.HTML != "" {
			return invalidField("html", "must be absent: only email has an HTML part"), http.StatusBadRequest
		}
	}
	if err := notify.CheckBody(v.Text); err != nil {
		return invalidField("text", fieldMessage(err)), http.StatusBadRequest
	}
	if len(v.HTML) > notify.MaxBodyLen {
		return invalidField("html", "is too long"), http.StatusBadRequest
	}
	if _, err := notify.Compile(v); err != nil {
		e := templateFailure(v, err)
		if te, ok := errors.AsType[*notify.TemplateError](err); ok {
			e.Field = te.Part
			e.Message = fmt.Sprintf("%s does not parse: %s", te.Part, err.Error())
		}
		return e, http.StatusUnprocessableEntity
	}
	return nil, 0
}

// fieldMessage is a FieldError's message without its field.
func fieldMessage(err error) string {
	if fe, ok := errors.AsType[*notify.FieldError](err); ok {
		return fe.Message
	}
	return err.Error()
}

func quoteAll(names []string) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += strconv.Quote(n)
	}
	return out
}

// getTemplate handles GET /templates/{name}[?version=N]: the template as
// of version N (default: its newest).
func (a *API) getTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !notify.ValidTemplateName(name) {
		writeError(w, http.StatusNotFound, errNoTemplate)
		return
	}
	version := 0
	if s, ok := r.URL.Query()["version"]; ok {
		v, err := strconv.Atoi(s[0])
		if len(s) != 1 || err != nil || v < 1 {
			writeError(w, http.StatusBadRequest, *invalidField("version", "must be a version number, 1 or more, given once"))
			return
		}
		version = v
	}
	t, err := a.cfg.Templates.Template(r.Context(), name, version)
	if a.storeFailed(w, r, "get template", err, errNoTemplate) {
		return
	}
	if version > t.Latest {
		writeError(w, http.StatusNotFound, apiError{Code: "not_found", Message: fmt.Sprintf("template %q has no version %d (its latest is %d)", name, version, t.Latest)})
		return
	}
	writeJSON(w, http.StatusOK, NewTemplateView(t))
}

// listTemplates handles GET /templates: every template as of its newest
// version, by name.
func (a *API) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := a.cfg.Templates.Templates(r.Context())
	if err != nil {
		a.unavailable(w, r, "list templates", err)
		return
	}
	writeJSON(w, http.StatusOK, TemplateList{Items: viewsOf(ts, NewTemplateView)})
}

// previewTemplate handles POST /templates/{name}/preview: renders as a
// create would, and sends nothing.
func (a *API) previewTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !notify.ValidTemplateName(name) {
		writeError(w, http.StatusNotFound, errNoTemplate)
		return
	}
	var b previewBody
	if e, status := a.readStrict(w, r, previewFields, &b); e != nil {
		writeError(w, status, *e)
		return
	}
	if !notify.ValidLocale(b.Locale) {
		writeError(w, http.StatusBadRequest, *invalidField("locale", "must be \"\" or a BCP 47 language tag such as de or pt-BR"))
		return
	}
	if b.TemplateVersion < 0 {
		writeError(w, http.StatusBadRequest, *invalidField("template_version", "must be 1 or more"))
		return
	}
	data := []byte(nil)
	if len(b.Data) > 0 && string(b.Data) != "null" {
		if b.Data[0] != '{' {
			writeError(w, http.StatusBadRequest, *invalidField("data", "must be a JSON object"))
			return
		}
		data = b.Data
	}
	channel := b.Channel
	if channel == "" {
		t, err := a.cfg.Templates.Template(r.Context(), name, b.TemplateVersion)
		switch {
		case errors.Is(err, notify.ErrNotFound):
			writeError(w, http.StatusUnprocessableEntity, *unprocessable("template", fmt.Sprintf("unknown template %q", name)))
			return
		case err != nil:
			a.unavailable(w, r, "preview template", err)
			return
		}
		var channels []string
		for _, v := range t.Variants {
			if !slices.Contains(channels, v.Channel) {
				channels = append(channels, v.Channel)
			}
		}
		if len(channels) != 1 {
			writeError(w, http.StatusBadRequest, *invalidField("channel", "is required: template "+strconv.Quote(name)+" has variants for "+quoteAll(channels)))
			return
		}
		channel = channels[0]
	}
	out, tv, e, status := a.render(r.Context(), name, b.TemplateVersion, channel, b.Locale, data, "locale")
	if status == http.StatusServiceUnavailable {
		a.unavailable(w, r, "preview template", errors.New(e.Message))
		return
	}
	if e != nil {
		writeError(w, status, *e)
		return
	}
	writeJSON(w, http.StatusOK, PreviewView{Name: name, Version: tv.Version, Channel: tv.Channel, Locale: tv.Locale,
		Subject: out.Subject, Text: out.Text, HTML: out.HTML})
}
