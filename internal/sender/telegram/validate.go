package telegram

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/heraldhq/herald/internal/notify"
)

// MaxTextLen is the longest message text the Bot API takes, in UTF-16
// code units (what Telegram counts): a character outside the Basic
// Multilingual Plane, an emoji, counts two.
const MaxTextLen = 4096

// Validate checks the Telegram fields of a create request: to is a chat
// id (an integer, negative for groups, -100... for channels) or a public
// @username (5 to 32 letters, digits or underscores); body is non-empty
// text of at most MaxTextLen UTF-16 units, without control characters
// other than tab and line breaks; subject is empty. It returns a
// *notify.FieldError, or nil.
func Validate(r notify.CreateRequest) error {
	if _, err := chatID(r.To); err != nil {
		return err
	}
	if r.Subject != "" {
		return &notify.FieldError{Field: "subject", Message: "must be empty for Telegram: a message is its body"}
	}
	bad := func(msg string) error { return &notify.FieldError{Field: "body", Message: msg} }
	switch {
	case strings.TrimSpace(r.Body) == "":
		return bad("is required")
	case len(r.Body) > 4*MaxTextLen:
		return bad("is too long")
	case !utf8.ValidString(r.Body):
		return bad("is not valid UTF-8")
	}
	units := 0
	for _, c := range r.Body {
		units += utf16Len(c)
		if unicode.IsControl(c) && c != '\t' && c != '\n' && c != '\r' {
			return bad("must not contain control characters")
		}
	}
	if units > MaxTextLen {
		return bad("is too long: at most 4096 UTF-16 code units")
	}
	return nil
}

func utf16Len(c rune) int {
	if c >= 0x10000 {
		return 2
	}
	return 1
}

// chatID checks a destination and returns it as the Bot API's chat_id
// takes it: a JSON number for an id, a JSON string for an @username.
func chatID(to string) (string, error) {
	bad := func(msg string) error { return &notify.FieldError{Field: "to", Message: msg} }
	if to == "" {
		return "", bad("is required")
	}
	if name, ok := strings.CutPrefix(to, "@"); ok {
		if len(name) < 5 || len(name) > 32 {
			return "", bad("must be a chat id or an @username of 5 to 32 characters")
		}
		for _, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
				return "", bad("an @username holds only letters, digits and underscores")
			}
		}
		return strconv.Quote(to), nil
	}
	n, err := strconv.ParseInt(to, 10, 64)
	if err != nil || n == 0 || strconv.FormatInt(n, 10) != to {
		return "", bad("must be a chat id (an integer) or an @username")
	}
	return to, nil
}
