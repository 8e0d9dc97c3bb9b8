package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/internal/notify"
)

// Recipients keeps recipients (issue 35, point 1). The stores implement
// it.
type Recipients interface {
	// PutRecipient creates or replaces a recipient and returns it with
	// its revision (1, then one more per put) and update time.
	PutRecipient(ctx context.Context, r notify.Recipient) (notify.Recipient, error)
	// Recipient returns one recipient, or notify.ErrNotFound.
	Recipient(ctx context.Context, userID string) (notify.Recipient, error)
	// DeleteRecipient deletes one recipient's record, or answers
	// notify.ErrNotFound.
	DeleteRecipient(ctx context.Context, userID string) error
}

// recipientKeys are the keys a PUT /recipients/{user_id} body may hold:
// the address field of each channel herald knows (fields), the locale and
// the time zone.
func recipientKeys(fields []notify.RecipientField) map[string]bool {
	keys := map[string]bool{"locale": true, "time_zone": true}
	for _, f := range fields {
		keys[f.Field] = true
	}
	return keys
}

// RecipientView is a recipient as the API shows it: user_id, the address
// field of every channel herald knows, in channel name order ("" for
// none), locale, time_zone, revision and updated_at (see MarshalJSON).
type RecipientView struct {
	UserID    string
	Addresses []AddressView
	Locale    string
	TimeZone  string
	Revision  int64
	UpdatedAt string
}

// AddressView is one address field of a RecipientView.
type AddressView struct {
	// Field is the JSON field (notify.RecipientField); Address the address,
	// "" for none.
	Field, Address string
}

// NewRecipientView renders r with the address fields of fields (see
// notify.Channels.RecipientFields).
func NewRecipientView(r notify.Recipient, fields []notify.RecipientField) RecipientView {
	v := RecipientView{UserID: r.UserID, Addresses: make([]AddressView, len(fields)),
		Locale: r.Locale, TimeZone: r.TimeZone, Revision: r.Revision, UpdatedAt: formatTime(r.UpdatedAt)}
	for i, f := range fields {
		v.Addresses[i] = AddressView{Field: f.Field, Address: r.Address(f.Channel)}
	}
	return v
}

// MarshalJSON writes the recipient as one JSON object, its keys in the
// order RecipientView gives: every address field between user_id and
// locale, each a string.
func (v RecipientView) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	put := func(key string, val any) {
		if b.Len() == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		k, _ := marshalJSON(key)
		x, _ := marshalJSON(val) // strings and an integer: no error; no HTML escaping, as every reply
		b.Write(k)
		b.WriteByte(':')
		b.Write(x)
	}
	put("user_id", v.UserID)
	for _, a := range v.Addresses {
		put(a.Field, a.Address)
	}
	put("locale", v.Locale)
	put("time_zone", v.TimeZone)
	put("revision", v.Revision)
	put("updated_at", v.UpdatedAt)
	b.WriteByte('}')
	return b.Bytes(), nil
}

var errNoRecipient = apiError{Code: "not_found", Message: "no such recipient"}

// userIDParam reads and checks the {user_id} path segment.
func userIDParam(r *http.Request) (string, *apiError) {
	id := r.PathValue("user_id")
	if err := notify.CheckText("user_id", id, notify.MaxUserIDLen); err != nil {
		return "", &apiError{Code: "invalid_field", Message: err.Error(), Field: "user_id"}
	}
	return id, nil
}

// recipientID returns the {user_id} of r's path for a route that reads or
// deletes a recipient. A malformed one names no recipient: it answers 404
// (errNoRecipient), as an unknown one does, and reports false.
func recipientID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, e := userIDParam(r)
	if e != nil {
		writeError(w, http.StatusNotFound, errNoRecipient)
	}
	return id, e == nil
}

// putRecipient handles PUT /recipients/{user_id}.
func (a *API) putRecipient(w http.ResponseWriter, r *http.Request) {
	id, e := userIDParam(r)
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	var body map[string]json.RawMessage
	if e, status := a.readStrict(w, r, recipientKeys(a.recipientFields), &body); e != nil {
		writeError(w, status, *e)
		return
	}
	rec, e := recipientOf(id, body, a.recipientFields)
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	if e := a.checkRecipient(rec); e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	put, err := a.cfg.Recipients.PutRecipient(r.Context(), rec)
	if err != nil {
		a.unavailable(w, r, "put recipient", err)
		return
	}
	writeJSON(w, http.StatusOK, NewRecipientView(put, a.recipientFields))
}

// getRecipient handles GET /recipients/{user_id}.
func (a *API) getRecipient(w http.ResponseWriter, r *http.Request) {
	id, ok := recipientID(w, r)
	if !ok {
		return
	}
	rec, err := a.cfg.Recipients.Recipient(r.Context(), id)
	if a.storeFailed(w, r, "get recipient", err, errNoRecipient) {
		return
	}
	writeJSON(w, http.StatusOK, NewRecipientView(rec, a.recipientFields))
}

// deleteRecipient handles DELETE /recipients/{user_id}: the recipient's
// record (its addresses, locale and time zone) is deleted. The user's
// notifications keep the addresses they were accepted with:
// `herald recipients erase` anonymises them.
func (a *API) deleteRecipient(w http.ResponseWriter, r *http.Request) {
	id, ok := recipientID(w, r)
	if !ok {
		return
	}
	err := a.cfg.Recipients.DeleteRecipient(r.Context(), id)
	if a.storeFailed(w, r, "delete recipient", err, errNoRecipient) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// recipientOf is the recipient id a PUT body (its keys checked, see
// recipientKeys) describes: each field a string, or null for none; the
// address fields by channel.
func recipientOf(id string, body map[string]json.RawMessage, fields []notify.RecipientField) (notify.Recipient, *apiError) {
	text := func(key string) (string, *apiError) {
		raw, ok := body[key]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", invalidField(key, "must be a string")
		}
		return s, nil
	}
	rec := notify.Recipient{UserID: id}
	for _, f := range fields {
		addr, e := text(f.Field)
		if e != nil {
			return rec, e
		}
		if addr != "" {
			if rec.Addresses == nil {
				rec.Addresses = map[string]string{}
			}
			rec.Addresses[f.Channel] = addr
		}
	}
	var e *apiError
	if rec.Locale, e = text("locale"); e != nil {
		return rec, e
	}
	if rec.TimeZone, e = text("time_zone"); e != nil {
		return rec, e
	}
	return rec, nil
}

// checkRecipient checks a recipient's fields: each address as a create to
// its channel checks its to (the webhook URL through the SSRF guard), the
// locale's shape, the time zone's name. Its error names the field.
func (a *API) checkRecipient(rec notify.Recipient) *apiError {
	for _, f := range a.recipientFields {
		addr := rec.Address(f.Channel)
		if addr == "" {
			continue
		}
		if err := a.checkAddress(f.Channel, addr); err != nil {
			return invalidField(f.Field, err.Error())
		}
	}
	if !notify.ValidLocale(rec.Locale) {
		return invalidField("locale", "must be a BCP 47 language tag such as de or pt-BR")
	}
	if rec.TimeZone != "" {
		if _, err := time.LoadLocation(rec.TimeZone); err != nil || rec.TimeZone == "Local" || strings.ContainsAny(rec.TimeZone, "\\") {
			return invalidField("time_zone", "must be an IANA time zone name such as Europe/Berlin")
		}
	}
	return nil
}

// addressError is why an address is refused, without the field name.
type addressError string

func (e addressError) Error() string { return string(e) }

// checkAddress checks addr as the to of a create on channel would be
// checked: with the channel's own validation when herald knows the
// channel, as plain text otherwise.
func (a *API) checkAddress(channel, addr string) error {
	spec, ok := a.cfg.KnownChannels[channel]
	if !ok || spec.Validate == nil {
		if err := notify.CheckText("to", addr, 2048); err != nil {
			return addressError(strings.TrimPrefix(err.Error(), "to: "))
		}
		return nil
	}
	req := notify.CreateRequest{UserID: "recipient", Channel: channel, To: addr, Body: "{}"}
	if spec.Subject {
		req.Subject = "subject"
	}
	err := spec.Validate(req)
	if fe, ok := errors.AsType[*notify.FieldError](err); ok && fe.Field == "to" {
		return addressError(fe.Message)
	}
	if err != nil {
		return addressError("is not a valid " + channel + " address")
	}
	return nil
}

// readStrict reads a JSON body as the create route does: application/json,
// at most MaxBodyBytes, valid UTF-8, one object of exactly spelled, unique
// keys of fields, decoded into target.
func (a *API) readStrict(w http.ResponseWriter, r *http.Request, fields map[string]bool, target any) (*apiError, int) {
	if e := checkContentType(r.Header.Values("Content-Type")); e != nil {
		return e, http.StatusUnsupportedMediaType
	}
	tooLarge := &apiError{Code: "too_large", Message: "the request body is larger than " + strconv.FormatInt(a.cfg.MaxBodyBytes, 10) + " bytes"}
	if r.ContentLength > a.cfg.MaxBodyBytes {
		return tooLarge, http.StatusRequestEntityTooLarge
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge, http.StatusRequestEntityTooLarge
		}
		return &apiError{Code: "invalid_body", Message: "the request body could not be read"}, http.StatusBadRequest
	}
	if !utf8.Valid(raw) {
		return &apiError{Code: "invalid_utf8", Message: "the request body is not valid UTF-8"}, http.StatusBadRequest
	}
	if e := scanKeys(raw, fields); e != nil {
		return e, http.StatusBadRequest
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(target); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return &apiError{Code: "invalid_field", Message: te.Field + " must be a " + te.Type.String(), Field: te.Field}, http.StatusBadRequest
		}
		return &apiError{Code: "invalid_json", Message: "the request body is not a valid JSON object"}, http.StatusBadRequest
	}
	return nil, 0
}
