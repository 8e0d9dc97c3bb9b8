package notify

import (
	"bytes"
	htmltemplate "html/template"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// TemplateVersion is one version of a template (PUT /templates/{name}):
// the parts of one channel in one locale. Versions are numbered per
// template name, 1, 2, ... in the order they were put, whatever their
// channel and locale; a version is never changed. "The template as of
// version v" is, for each channel and locale, its newest version at or
// below v: a create that pins template_version v renders what was current
// when v was put, for every locale.
type TemplateVersion struct {
	Name    string
	Version int
	Channel string
	// Locale is a BCP 47 language tag, or "" for the default variant: the
	// one a recipient whose locale has no variant of its own receives.
	Locale string
	// Subject is the email's subject (email only).
	Subject string
	// Text is the text body: the email's plain-text part, the Telegram
	// message, the webhook body.
	Text string
	// HTML is the email's HTML part (email only; optional).
	HTML      string
	CreatedAt time.Time
}

// Limits on a template.
const (
	MaxTemplateNameLen = 100
	MaxLocaleLen       = 35
)

var (
	templateNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	localeRe       = regexp.MustCompile(`^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$`)
)

// ValidTemplateName reports whether name is a template name: 1 to 100
// letters, digits, '_', '.' or '-', starting with a letter or digit (it
// is a path segment).
func ValidTemplateName(name string) bool {
	return len(name) <= MaxTemplateNameLen && templateNameRe.MatchString(name)
}

// ValidLocale reports whether l is "" or has the shape of a BCP 47
// language tag ("de", "pt-BR", "zh-Hant-TW").
func ValidLocale(l string) bool {
	return l == "" || (len(l) <= MaxLocaleLen && localeRe.MatchString(l))
}

// LocaleCandidates are the locales tried, in order, for a recipient whose
// locale is l: l itself, then its language alone ("de" for "de-AT"), then
// the default variant (""). Tags compare case-insensitively: they are
// given in lower case.
func LocaleCandidates(l string) []string {
	l = strings.ToLower(l)
	out := []string{}
	if l != "" {
		out = append(out, l)
		if i := strings.IndexByte(l, '-'); i > 0 {
			out = append(out, l[:i])
		}
	}
	return append(out, "")
}

// PickTemplate returns, of a template's variants, the one for channel in
// the first of locales that has one.
func PickTemplate(variants []TemplateVersion, channel string, locales []string) (TemplateVersion, bool) {
	for _, l := range locales {
		for _, v := range variants {
			if v.Channel == channel && strings.EqualFold(v.Locale, l) {
				return v, true
			}
		}
	}
	return TemplateVersion{}, false
}

// TemplateError is a template that does not parse, or does not render with
// the data given: which part, on which line, and the variable missing
// from data when that is the cause.
type TemplateError struct {
	// Part is subject, text or html.
	Part string
	// Line is the line of the part the error is on (0 when unknown).
	Line int
	// Variable is the missing variable as the template names it
	// (".order.id"), "" when the error is another.
	Variable string
	// Message is what went wrong, in the template package's words.
	Message string
}

func (e *TemplateError) Error() string {
	var b strings.Builder
	b.WriteString(e.Part)
	if e.Line > 0 {
		b.WriteString(" line " + strconv.Itoa(e.Line))
	}
	if e.Variable != "" {
		b.WriteString(": variable " + e.Variable + " is missing from data")
		return b.String()
	}
	b.WriteString(": " + e.Message)
	return b.String()
}

// Field is the request field a template error is about: data.<path> for a
// missing variable, template otherwise.
func (e *TemplateError) Field() string {
	if e.Variable != "" && strings.HasPrefix(e.Variable, ".") {
		return "data" + e.Variable
	}
	return "template"
}

// CompiledTemplate is a parsed template version, ready to render. It is
// safe for concurrent use.
type CompiledTemplate struct {
	Version       TemplateVersion
	subject, text *template.Template
	html          *htmltemplate.Template
}

// Compile parses the parts of v: subject and text with text/template, html
// with html/template (which escapes what data puts in it by context). A
// variable missing from data is an error when rendering
// (missingkey=error), never an empty string. Its error is a
// *TemplateError.
func Compile(v TemplateVersion) (*CompiledTemplate, error) {
	c := &CompiledTemplate{Version: v}
	var err error
	if c.subject, err = parseText("subject", v.Subject); err != nil {
		return nil, err
	}
	if c.text, err = parseText("text", v.Text); err != nil {
		return nil, err
	}
	if v.HTML != "" {
		c.html, err = htmltemplate.New("html").Option("missingkey=error").Parse(v.HTML)
		if err != nil {
			return nil, templateError("html", err)
		}
	}
	return c, nil
}

func parseText(part, src string) (*template.Template, error) {
	if src == "" {
		return nil, nil
	}
	t, err := template.New(part).Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, templateError(part, err)
	}
	return t, nil
}

// Rendered is what a template rendered: the parts a notification stores.
type Rendered struct {
	Subject, Text, HTML string
}

// Render executes the parts with data (a JSON object decoded with
// UseNumber, so numbers print as they were written). Its error is a
// *TemplateError.
func (c *CompiledTemplate) Render(data map[string]any) (Rendered, error) {
	var out Rendered
	var b bytes.Buffer
	exec := func(part string, run func() error, dst *string) error {
		b.Reset()
		if err := run(); err != nil {
			return templateError(part, err)
		}
		*dst = b.String()
		return nil
	}
	if data == nil {
		data = map[string]any{}
	}
	if c.subject != nil {
		if err := exec("subject", func() error { return c.subject.Execute(&b, data) }, &out.Subject); err != nil {
			return Rendered{}, err
		}
	}
	if c.text != nil {
		if err := exec("text", func() error { return c.text.Execute(&b, data) }, &out.Text); err != nil {
			return Rendered{}, err
		}
	}
	if c.html != nil {
		if err := exec("html", func() error { return c.html.Execute(&b, data) }, &out.HTML); err != nil {
			return Rendered{}, err
		}
	}
	return out, nil
}

var (
	// templateErrRe reads the part and line from a text/template or
	// html/template error: "template: text:3:5: executing ..." or
	// "html/template:html:3:5: ...".
	templateErrRe = regexp.MustCompile(`^(?:html/)?template: ?([a-z]+):(\d+)(?::\d+)?: (.*)$`)
	// missingKeyRe reads the variable of a missingkey=error failure.
	missingKeyRe = regexp.MustCompile(`at <([^>]+)>: map has no entry for key`)
	// nilMapRe reads the variable of a field of a value that is absent
	// ("nil pointer evaluating interface {}.x").
	nilMapRe = regexp.MustCompile(`at <([^>]+)>: nil pointer evaluating`)
)

func templateError(part string, err error) *TemplateError {
	msg := err.Error()
	e := &TemplateError{Part: part, Message: msg}
	if m := templateErrRe.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[2])
		e.Message = m[3]
	}
	if m := missingKeyRe.FindStringSubmatch(msg); m != nil {
		e.Variable = m[1]
	} else if m := nilMapRe.FindStringSubmatch(msg); m != nil {
		e.Variable = m[1]
	}
	return e
}

// Template is a template as of one of its versions: for each channel and
// locale, the newest variant at or below that version.
type Template struct {
	Name string
	// Latest is the template's newest version number, whatever the
	// version read.
	Latest int
	// Variants are ordered by channel, then locale.
	Variants []TemplateVersion
}
