package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// Preferences are one user's choices (PUT /recipients/{user_id}/preferences):
// by category, then by channel, whether the user takes that category on
// that channel. A category or channel that is not listed is allowed: a
// user opts out, not in.
type Preferences map[string]map[string]bool

// Allows reports whether p lets category reach the user on channel.
func (p Preferences) Allows(category, channel string) bool {
	allowed, ok := p[category][channel]
	return !ok || allowed
}

// ValidCategory reports whether name is a category name: the same shape
// as a template name (1 to 100 letters, digits, '_', '.' or '-', starting
// with a letter or digit), as it appears in paths and links.
func ValidCategory(name string) bool { return ValidTemplateName(name) }

// PreferenceLink is what a signed preference link (and an email's
// List-Unsubscribe URL) records when it is followed: the user opts out of
// Category on Channel. It is valid until Expires.
type PreferenceLink struct {
	UserID   string    `json:"u"`
	Category string    `json:"c"`
	Channel  string    `json:"ch"`
	Expires  time.Time `json:"-"`
	// ExpiresUnix is Expires on the wire, in seconds.
	ExpiresUnix int64 `json:"e"`
}

// PreferenceLinkTTL is how long a preference link stays valid: an email
// is read (and its unsubscribe link followed) long after it was sent, and
// a link only ever opts out.
const PreferenceLinkTTL = 366 * 24 * time.Hour

// ErrBadLink is the error of a preference link token that is malformed,
// not signed by the key, or expired.
var ErrBadLink = errors.New("the preference link is not valid")

// linkMAC is the HMAC-SHA256 of a token's payload part under key.
func linkMAC(key []byte, payload string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("herald preference link v1\x00"))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// SignPreferenceLink returns the token of l under key: its fields, then
// their HMAC-SHA256, each base64url without padding, joined by a dot. The
// token is a path segment.
func SignPreferenceLink(key []byte, l PreferenceLink) string {
	l.ExpiresUnix = l.Expires.Unix()
	b, _ := json.Marshal(l) // strings and an int: never fails
	payload := base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + base64.RawURLEncoding.EncodeToString(linkMAC(key, payload))
}

// VerifyPreferenceLink checks token's signature under key and its expiry
// at now, and returns what it records; any fault is ErrBadLink. The
// signature is checked before anything of the payload is read.
func VerifyPreferenceLink(key []byte, token string, now time.Time) (PreferenceLink, error) {
	payload, sig, ok := strings.Cut(token, ".")
	if !ok || len(key) == 0 {
		return PreferenceLink{}, ErrBadLink
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, linkMAC(key, payload)) {
		return PreferenceLink{}, ErrBadLink
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return PreferenceLink{}, ErrBadLink
	}
	var l PreferenceLink
	if err := json.Unmarshal(b, &l); err != nil || l.UserID == "" || !ValidCategory(l.Category) || l.Channel == "" {
		return PreferenceLink{}, ErrBadLink
	}
	l.Expires = time.Unix(l.ExpiresUnix, 0).UTC()
	if !now.Before(l.Expires) {
		return PreferenceLink{}, ErrBadLink
	}
	return l, nil
}
