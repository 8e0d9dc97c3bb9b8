package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/heraldhq/herald/internal/notify"
)

// requestFields are the keys a create body may hold, spelled exactly.
// encoding/json matches keys case-insensitively and keeps the last of
// duplicates, which would let {"to":..,"TO":..} smuggle a second recipient
// past a reviewing proxy; the body is therefore scanned for exact, unique
// keys before it is decoded.
var requestFields = map[string]bool{"user_id": true, "channel": true, "to": true, "subject": true, "body": true,
	"send_at": true, "expires_at": true, "time_zone": true, "quiet_hours": true, "urgent": true, "priority": true,
	"template": true, "template_version": true, "data": true, "category": true, "channels": true}

// maxEchoLen bounds how much of a client's unknown key is echoed back.
const maxEchoLen = 64

// clip shortens s to at most n bytes without splitting a character.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut == 0 {
		// No rune starts in the first n bytes (invalid UTF-8): cut at n;
		// callers replace what is not valid for display.
		cut = n
	}
	return s[:cut]
}

// createBody is a create body as decoded: the body is kept as JSON text
// until the channel says whether it must be a string.
type createBody struct {
	UserID  string          `json:"user_id"`
	Channel string          `json:"channel"`
	To      string          `json:"to"`
	Subject string          `json:"subject"`
	Body    json.RawMessage `json:"body"`
	// The timing fields (timingBody), spelled out so that a type error
	// names the field itself.
	SendAt     *string          `json:"send_at"`
	ExpiresAt  *string          `json:"expires_at"`
	TimeZone   *string          `json:"time_zone"`
	QuietHours *quietHoursField `json:"quiet_hours"`
	Urgent     *bool            `json:"urgent"`
	// Priority is high, normal or bulk (issue 34, point 5); absent or
	// null: normal.
	Priority *string `json:"priority"`
	// Template names the template the content is rendered from, with
	// Data, a JSON object; TemplateVersion pins its version (issue 35,
	// point 2).
	Template        *string         `json:"template"`
	TemplateVersion *int            `json:"template_version"`
	Data            json.RawMessage `json:"data"`
	// Category is the notification's category (issue 35, point 3).
	Category *string `json:"category"`
	// Channels is the fallback list (issue 35, point 5): channels in
	// order of preference, instead of channel.
	Channels []string `json:"channels"`
}

// decodeCreate decodes a create body strictly: valid UTF-8 (encoding/json
// would silently replace bad bytes), one JSON object with exactly spelled,
// unique, known keys of the right types, and nothing after it. Its error is
// the reply, with one of the codes invalid_utf8, invalid_json, unknown_field
// or invalid_field. The body is a string, except for a channel of channels
// that takes a JSON body (webhook): there any JSON value other than null is
// accepted, and one that is not a string is held as its compact JSON text.
// It does not validate the values (CreateRequest.Validate does).
func decodeCreate(raw []byte, channels notify.Channels) (notify.CreateRequest, *apiError) {
	var cb createBody
	return decodeInto(raw, channels, requestFields, &cb, &cb)
}

// decodeInto is decodeCreate for a body that may hold the keys of fields:
// it decodes into target, which is cb itself or a struct that embeds it
// beside fields of its own (a batch item's idempotency_key), and reads the
// request from cb.
func decodeInto(raw []byte, channels notify.Channels, fields map[string]bool, target any, cb *createBody) (notify.CreateRequest, *apiError) {
	var req notify.CreateRequest
	if !utf8.Valid(raw) {
		return req, &apiError{Code: "invalid_utf8", Message: "the request body is not valid UTF-8"}
	}
	if e := scanKeys(raw, fields); e != nil {
		return req, e
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(target); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return req, &apiError{Code: "invalid_field", Message: te.Field + " must be a " + te.Type.String(), Field: te.Field}
		}
		return req, &apiError{Code: "invalid_json", Message: "the request body is not a valid JSON object"}
	}
	req = notify.CreateRequest{UserID: cb.UserID, Channel: cb.Channel, To: cb.To, Subject: cb.Subject}
	// A channel this server does not take is the error to report, whatever
	// the body: its body is read leniently, and Validate names channel.
	spec, known := channels[cb.Channel]
	body, e := decodeBody(cb.Body, spec.JSONBody || !known)
	if e != nil {
		return req, e
	}
	req.Body = body
	if cb.Priority != nil {
		req.Priority = notify.Priority(*cb.Priority)
		if !req.Priority.Valid() || req.Priority == "" {
			return req, &apiError{Code: "invalid_field", Message: "priority must be one of high, normal, bulk", Field: "priority"}
		}
	}
	if e := cb.decodeTemplate(&req); e != nil {
		return req, e
	}
	if cb.Category != nil {
		if !notify.ValidCategory(*cb.Category) {
			return req, invalidField("category", "must be 1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit")
		}
		req.Category = *cb.Category
	}
	if e := cb.decodeChannels(&req, channels); e != nil {
		return req, e
	}
	tb := timingBody{SendAt: cb.SendAt, ExpiresAt: cb.ExpiresAt, TimeZone: cb.TimeZone, QuietHours: cb.QuietHours, Urgent: cb.Urgent}
	if e := tb.decode(&req); e != nil {
		return req, e
	}
	return req, nil
}

// decodeTemplate checks the template fields' shapes and puts them in req:
// a template name, a version of 1 or more, data a JSON object; the
// subject and body come from the template, so a create that names one
// gives neither.
func (cb *createBody) decodeTemplate(req *notify.CreateRequest) *apiError {
	hasData := len(cb.Data) > 0 && string(cb.Data) != "null"
	if cb.Template == nil {
		switch {
		case cb.TemplateVersion != nil:
			return invalidField("template_version", "needs template")
		case hasData:
			return invalidField("data", "needs template (data is what a template renders)")
		}
		return nil
	}
	if !notify.ValidTemplateName(*cb.Template) {
		return invalidField("template", "must be 1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit")
	}
	req.Template = *cb.Template
	if cb.TemplateVersion != nil {
		if *cb.TemplateVersion < 1 {
			return invalidField("template_version", "must be 1 or more")
		}
		req.TemplateVersion = *cb.TemplateVersion
	}
	if req.Subject != "" {
		return invalidField("subject", "must be absent with template: the template renders it")
	}
	if req.Body != "" {
		return invalidField("body", "must be absent with template: the template renders it")
	}
	if hasData {
		if cb.Data[0] != '{' {
			return invalidField("data", "must be a JSON object")
		}
		var b bytes.Buffer
		if err := json.Compact(&b, cb.Data); err != nil {
			return invalidField("data", "must be a JSON object")
		}
		req.Data = b.String()
	}
	return nil
}

// decodeBody reads the body's JSON value: a string (absent or null: empty,
// as encoding/json leaves a string field), or, when jsonBody, any other
// JSON value as its compact text.
func decodeBody(v json.RawMessage, jsonBody bool) (string, *apiError) {
	if len(v) == 0 || string(v) == "null" {
		return "", nil
	}
	if v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", &apiError{Code: "invalid_json", Message: "the request body is not a valid JSON object"}
		}
		return s, nil
	}
	if !jsonBody {
		return "", &apiError{Code: "invalid_field", Message: "body must be a string", Field: "body"}
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return "", &apiError{Code: "invalid_json", Message: "the request body is not a valid JSON object"}
	}
	return b.String(), nil
}

// scanKeys checks the shape of the body before it is decoded: one object,
// keys of fields spelled exactly and given once, nothing after it.
func scanKeys(raw []byte, fields map[string]bool) *apiError {
	invalid := func(msg string) *apiError { return &apiError{Code: "invalid_json", Message: msg} }
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err == io.EOF {
		return invalid("the request body is empty")
	}
	if err != nil {
		return invalid("the request body is not valid JSON")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return invalid("the request body must be a JSON object")
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return invalid("the request body is not valid JSON")
		}
		key, ok := tok.(string)
		if !ok {
			return invalid("the request body is not valid JSON")
		}
		if !fields[key] {
			key = clip(key, maxEchoLen)
			return &apiError{Code: "unknown_field", Message: "unknown field " + strconv.Quote(key), Field: key}
		}
		if seen[key] {
			return &apiError{Code: "invalid_field", Message: key + " is given more than once", Field: key}
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return invalid("the request body is not valid JSON")
		}
		if !pairedSurrogates(v) {
			return &apiError{Code: "invalid_utf8", Message: key + " holds an unpaired UTF-16 surrogate escape", Field: key}
		}
	}
	if _, err := dec.Token(); err != nil {
		return invalid("the request body is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("the request body must hold one JSON object and nothing after it")
	}
	return nil
}

// pairedSurrogates reports whether every \u escape of a UTF-16 surrogate in
// the JSON text v is half of a pair. encoding/json would silently turn a lone
// one into U+FFFD, the same silent change that invalid UTF-8 bytes get.
func pairedSurrogates(v []byte) bool {
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		if i+1 >= len(v) || v[i+1] != 'u' {
			i++ // a one-character escape such as \" or \\
			continue
		}
		r, ok := hex4(v, i+2)
		if !ok {
			return false
		}
		i += 5
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return false
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(v) || v[i+1] != '\\' || v[i+2] != 'u' {
				return false
			}
			lo, ok := hex4(v, i+3)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

// hex4 parses the four hex digits at v[i:].
func hex4(v []byte, i int) (rune, bool) {
	if i+4 > len(v) {
		return 0, false
	}
	var r rune
	for _, c := range v[i : i+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// decodeChannels checks a fallback list (channels) and puts it in req:
// 1 to notify.MaxChannels distinct channels of channels, with no
// channel or channel its first (the OpenAPI document tells a create's
// shapes apart by channel); the addresses come from the user's recipient and the content
// from a template's variant for each channel, so a create with channels
// names a template and gives no to.
func (cb *createBody) decodeChannels(req *notify.CreateRequest, channels notify.Channels) *apiError {
	if cb.Channels == nil {
		return nil
	}
	switch {
	case len(cb.Channels) == 0 || len(cb.Channels) > notify.MaxChannels:
		return invalidField("channels", fmt.Sprintf("must list 1 to %d channels", notify.MaxChannels))
	case cb.Channel != "" && cb.Channel != cb.Channels[0]:
		return invalidField("channel", "must be absent with channels, or be its first")
	case cb.To != "":
		return invalidField("to", "must be absent with channels: each channel's address comes from the recipient")
	case cb.Template == nil:
		return invalidField("template", "is required with channels: each channel's content is rendered from the template's variant for it")
	}
	for i, ch := range cb.Channels {
		if _, ok := channels[ch]; !ok {
			return invalidField("channels", fmt.Sprintf("channels[%d] %s", i, channels.MustBe()))
		}
		if slices.Contains(cb.Channels[:i], ch) {
			return invalidField("channels", fmt.Sprintf("channels[%d] %q is listed twice", i, ch))
		}
	}
	req.Channels = slices.Clone(cb.Channels)
	return nil
}
