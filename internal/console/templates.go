package console

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/heraldhq/herald/internal/notify"
)

// templatesData is the Templates page: every template, and a preview of
// one variant when the form asked for it.
type templatesData struct {
	Items []notify.Template
	// The preview form's fields, as given.
	Name, Channel, Locale, Data string
	// Preview is the rendering, PreviewOf the variant rendered; Error why
	// there is none.
	Preview   *notify.Rendered
	PreviewOf notify.TemplateVersion
	Error     string
}

// templates handles GET /ui/templates[?name=&channel=&locale=&data=]: the
// list, and the preview of name's variant for channel in locale with
// data, chosen and rendered as a create would (the same fallback of
// locales, the same errors). A preview sends nothing and changes nothing,
// so it is a GET.
func (c *Console) templates(w http.ResponseWriter, r *http.Request) {
	ts, err := c.cfg.Templates.Templates(r.Context())
	if err != nil {
		c.unavailable(w, r, "list templates", err)
		return
	}
	q := r.URL.Query()
	d := templatesData{Items: ts, Name: q.Get("name"), Channel: q.Get("channel"), Locale: q.Get("locale"), Data: q.Get("data")}
	if d.Name != "" {
		d.PreviewOf, d.Preview, d.Error = preview(ts, d)
	}
	status := http.StatusOK
	if d.Error != "" {
		status = http.StatusUnprocessableEntity
	}
	c.render(w, r, status, "templates", d)
}

// preview renders the variant the form names.
func preview(ts []notify.Template, d templatesData) (notify.TemplateVersion, *notify.Rendered, string) {
	var tpl *notify.Template
	for i := range ts {
		if ts[i].Name == d.Name {
			tpl = &ts[i]
		}
	}
	if tpl == nil {
		return notify.TemplateVersion{}, nil, "No template " + d.Name + "."
	}
	channel := d.Channel
	if channel == "" && len(tpl.Variants) > 0 {
		channel = tpl.Variants[0].Channel
	}
	v, ok := notify.PickTemplate(tpl.Variants, channel, notify.LocaleCandidates(d.Locale))
	if !ok {
		return notify.TemplateVersion{}, nil, "Template " + d.Name + " has no " + channel + " variant for locale " + d.Locale + " nor a default one."
	}
	var data map[string]any
	if d.Data != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(d.Data)))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			return v, nil, "The data is not a JSON object."
		}
	}
	ct, err := notify.Compile(v)
	if err != nil {
		return v, nil, err.Error()
	}
	out, err := ct.Render(data)
	if err != nil {
		return v, nil, err.Error()
	}
	return v, &out, ""
}
