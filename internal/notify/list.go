package notify

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// ListFilter selects notifications for a listing, newest first: by
// created_at descending, then id descending, a total order (ids are unique)
// that keyset pagination can resume from.
type ListFilter struct {
	// UserID, when not empty, keeps one user's notifications.
	UserID string
	// Status, when not empty, keeps the notifications in that status.
	Status Status
	// Channel, when not empty, keeps the notifications of that channel.
	Channel string
	// CreatedAfter, when not zero, keeps those created at or after it.
	CreatedAfter time.Time
	// CreatedBefore, when not zero, keeps those created strictly before it;
	// with CreatedAfter it makes a half-open window [after, before), so
	// that consecutive windows tile without overlap.
	CreatedBefore time.Time
	// Limit is the most a page holds; it must be at least 1 (the API and
	// the command line apply their default).
	Limit int
	// After, when set, resumes a listing: only notifications strictly
	// after this position in the order (that is, older) are listed.
	After *ListPosition
}

// ListPosition is a notification's place in a listing's order: where the
// next page starts.
type ListPosition struct {
	CreatedAt time.Time
	ID        int64
}

// ListPage is one page of a listing.
type ListPage struct {
	// Items are the notifications of the page, newest first, without their
	// Body (a listing never needs it, and bodies can be large).
	Items []Notification
	// Next is the position to resume from, nil when the listing is done.
	Next *ListPosition
}

// NewListPage is the page of a listing that read limit+1 items (one more
// than the page holds, to learn whether there is a next page): the first
// limit, and the position after the last of them when there were more.
func NewListPage(items []Notification, limit int) ListPage {
	page := ListPage{Items: items}
	if len(items) > limit {
		page.Items = items[:limit]
		next := page.Items[limit-1].Position()
		page.Next = &next
	}
	return page
}

// Position returns n's place in a listing's order.
func (n Notification) Position() ListPosition {
	return ListPosition{CreatedAt: n.CreatedAt, ID: n.ID}
}

// ErrBadCursor is returned by DecodeCursor for a cursor that herald did not
// write as it is: malformed, truncated, edited, or of an unknown version.
var ErrBadCursor = errors.New("the cursor is not one herald issued")

// ErrForeignCursor is returned by DecodeCursor for a valid cursor issued for
// other filters: resuming from it would silently list something else.
var ErrForeignCursor = errors.New("the cursor belongs to a listing with other filters")

// MaxCursorLen bounds the length of a cursor DecodeCursor accepts; a cursor
// herald writes is about 130 characters.
const MaxCursorLen = 512

const cursorVersion = 1

// cursorSumLen is the length of the checksum closing a decoded cursor.
const cursorSumLen = 12

// cursorBody is the JSON inside a cursor. Field names are short: the
// cursor travels in URLs.
type cursorBody struct {
	V  int    `json:"v"`
	At string `json:"at,omitempty"`
	ID int64  `json:"id,omitempty"`
	// K is the key of a listing ordered by a text key (destinations).
	K string `json:"k,omitempty"`
	// F fingerprints the filters the cursor belongs to.
	F string `json:"f"`
}

// fingerprint digests the filters that define a listing (not Limit: a
// client may change its page size between pages, nor After).
func (f ListFilter) fingerprint() string {
	fields := []string{f.UserID, string(f.Status), stamp(f.CreatedAfter), stamp(f.CreatedBefore)}
	if f.Channel != "" {
		// Only when set, so that the cursors issued before the channel
		// filter existed stay valid.
		fields = append(fields, "channel", f.Channel)
	}
	return fingerprint(fields)
}

func fingerprint(fields []string) string {
	var b bytes.Buffer
	for _, s := range fields {
		// Length-prefixed, so that no two filter sets share an encoding.
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	sum := sha256.Sum256(b.Bytes())
	return base64.RawURLEncoding.EncodeToString(sum[:9])
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func cursorSum(body []byte) []byte {
	h := sha256.New()
	h.Write([]byte("herald list cursor\x00"))
	h.Write(body)
	return h.Sum(nil)[:cursorSumLen]
}

// EncodeCursor writes p as an opaque cursor bound to f's filters:
// URL-safe base64 of a versioned JSON body followed by a checksum. The
// cursor holds no secret and grants nothing (it only names a place in a
// listing the client may read anyway), so the checksum is keyless: it makes
// an edited or truncated cursor fail loudly, without a key that every API
// replica would have to share.
func (f ListFilter) EncodeCursor(p ListPosition) string {
	return encodeCursor(f.fingerprint(), p.CreatedAt, p.ID)
}

// DecodeCursor reads a cursor written by EncodeCursor for the same filters.
// It fails with ErrBadCursor for anything else, and with ErrForeignCursor
// for a cursor of another listing.
func (f ListFilter) DecodeCursor(s string) (ListPosition, error) {
	at, id, err := decodeCursor(s, f.fingerprint())
	return ListPosition{CreatedAt: at, ID: id}, err
}

// EncodeDeadLetterCursor writes p as an opaque cursor of the dead-letter
// listing whose filters are given as the client wrote them (since as a
// duration, not the instant it stands for at each page), in the same form as
// ListFilter.EncodeCursor. A cursor of one listing is foreign to the other.
func EncodeDeadLetterCursor(filters []string, p DeadLetterPosition) string {
	return encodeCursor(deadLetterFingerprint(filters), p.FailedAt, p.ID)
}

// DecodeDeadLetterCursor reads a cursor written by EncodeDeadLetterCursor
// for the same filters, failing like ListFilter.DecodeCursor.
func DecodeDeadLetterCursor(filters []string, s string) (DeadLetterPosition, error) {
	at, id, err := decodeCursor(s, deadLetterFingerprint(filters))
	return DeadLetterPosition{FailedAt: at, ID: id}, err
}

func deadLetterFingerprint(filters []string) string {
	return fingerprint(append([]string{"dead-letters"}, filters...))
}

func encodeCursor(fp string, at time.Time, id int64) string {
	return encodeBody(cursorBody{At: at.UTC().Format(time.RFC3339Nano), ID: id, F: fp})
}

func decodeCursor(s, fp string) (time.Time, int64, error) {
	c, err := decodeBody(s, fp)
	if err != nil {
		return time.Time{}, 0, err
	}
	if c.ID <= 0 || c.K != "" {
		return time.Time{}, 0, ErrBadCursor
	}
	at, err := time.Parse(time.RFC3339Nano, c.At)
	if err != nil {
		return time.Time{}, 0, ErrBadCursor
	}
	return at, c.ID, nil
}

// decodeBody reads and checks a cursor's body: its encoding, checksum,
// version and fields, and that it belongs to the listing fp names (else
// ErrForeignCursor).
func decodeBody(s, fp string) (cursorBody, error) {
	var c cursorBody
	if len(s) > MaxCursorLen {
		return c, ErrBadCursor
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) <= cursorSumLen {
		return c, ErrBadCursor
	}
	body, sum := raw[:len(raw)-cursorSumLen], raw[len(raw)-cursorSumLen:]
	if !bytes.Equal(sum, cursorSum(body)) {
		return c, ErrBadCursor
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || dec.More() || c.V != cursorVersion {
		return cursorBody{}, ErrBadCursor
	}
	if c.F != fp {
		return cursorBody{}, ErrForeignCursor
	}
	return c, nil
}

func encodeBody(c cursorBody) string {
	c.V = cursorVersion
	body, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(append(body, cursorSum(body)...))
}

func attemptsFingerprint(notificationID int64, newest bool) string {
	order := "oldest"
	if newest {
		order = "newest"
	}
	return fingerprint([]string{"attempts", FormatID(notificationID), order})
}

// EncodeAttemptCursor writes the attempt to resume after (its ID) as an
// opaque cursor of notificationID's attempts in the order f lists them, in
// the form of ListFilter.EncodeCursor.
func (f AttemptFilter) EncodeAttemptCursor(notificationID int64, after int64) string {
	return encodeBody(cursorBody{ID: after, F: attemptsFingerprint(notificationID, f.Newest)})
}

// DecodeAttemptCursor reads a cursor written by EncodeAttemptCursor for
// the same notification and order, failing like ListFilter.DecodeCursor.
func (f AttemptFilter) DecodeAttemptCursor(notificationID int64, s string) (int64, error) {
	c, err := decodeBody(s, attemptsFingerprint(notificationID, f.Newest))
	if err != nil {
		return 0, err
	}
	if c.ID <= 0 || c.At != "" || c.K != "" {
		return 0, ErrBadCursor
	}
	return c.ID, nil
}

func (f DestinationFilter) fingerprint() string {
	return fingerprint([]string{"destinations", f.State})
}

// EncodeCursor writes the key to resume after as an opaque cursor bound
// to f's filters, in the form of ListFilter.EncodeCursor.
func (f DestinationFilter) EncodeCursor(after string) string {
	return encodeBody(cursorBody{K: after, F: f.fingerprint()})
}

// DecodeCursor reads a cursor written by EncodeCursor for the same
// filters, failing like ListFilter.DecodeCursor.
func (f DestinationFilter) DecodeCursor(s string) (string, error) {
	c, err := decodeBody(s, f.fingerprint())
	if err != nil {
		return "", err
	}
	if c.K == "" || c.At != "" || c.ID != 0 {
		return "", ErrBadCursor
	}
	return c.K, nil
}
