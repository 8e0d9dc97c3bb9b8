package notify

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCursor(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 12, 0, 0, 123456000, time.FixedZone("x", 3600))
	f := ListFilter{UserID: "ann", Status: StatusFailed, CreatedAfter: at.Add(-time.Hour), Limit: 10}
	c := f.EncodeCursor(ListPosition{CreatedAt: at, ID: 42})
	require.Less(t, len(c), MaxCursorLen)
	require.NotContains(t, c, "ann", "opaque: the filters are not readable in it")

	p, err := f.DecodeCursor(c)
	require.NoError(t, err)
	require.True(t, at.Equal(p.CreatedAt))
	require.EqualValues(t, 42, p.ID)

	// The limit is not part of the listing; the same instant in another
	// zone is the same filter.
	g := f
	g.Limit = 500
	g.CreatedAfter = f.CreatedAfter.UTC()
	_, err = g.DecodeCursor(c)
	require.NoError(t, err)

	for name, other := range map[string]ListFilter{
		"user":   {UserID: "bob", Status: StatusFailed, CreatedAfter: f.CreatedAfter},
		"status": {UserID: "ann", CreatedAfter: f.CreatedAfter},
		"after":  {UserID: "ann", Status: StatusFailed},
		"before": {UserID: "ann", Status: StatusFailed, CreatedAfter: f.CreatedAfter, CreatedBefore: at},
		// Length-prefixed fields: moving text between them changes the
		// fingerprint.
		"shifted": {UserID: "annfailed", CreatedAfter: f.CreatedAfter},
	} {
		_, err := other.DecodeCursor(c)
		require.ErrorIs(t, err, ErrForeignCursor, name)
	}

	raw, err := base64.RawURLEncoding.DecodeString(c)
	require.NoError(t, err)
	edited := strings.Replace(string(raw), `"id":42`, `"id":43`, 1)
	for name, bad := range map[string]string{
		"empty":     "",
		"garbage":   "not a cursor",
		"truncated": c[:len(c)-3],
		"edited":    base64.RawURLEncoding.EncodeToString([]byte(edited)),
		"padded":    c + "==",
		"long":      strings.Repeat("A", MaxCursorLen+1),
	} {
		_, err := f.DecodeCursor(bad)
		require.ErrorIs(t, err, ErrBadCursor, name)
	}
}

// FuzzDecodeCursor feeds arbitrary text to the cursor decoder: it never
// panics, fails only with ErrBadCursor or ErrForeignCursor, and what it
// accepts re-encodes to a cursor that decodes to the same position.
func FuzzDecodeCursor(f *testing.F) {
	filter := ListFilter{UserID: "u", Status: StatusSent}
	f.Add(filter.EncodeCursor(ListPosition{CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), ID: 9}))
	f.Add(ListFilter{}.EncodeCursor(ListPosition{CreatedAt: time.Unix(0, 0), ID: 1}))
	f.Add("")
	f.Add("eyJ2IjoxfQ")
	f.Add(strings.Repeat("_", 100))
	f.Fuzz(func(t *testing.T, s string) {
		p, err := filter.DecodeCursor(s)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) && !errors.Is(err, ErrForeignCursor) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if p.ID <= 0 {
			t.Fatalf("id %d accepted", p.ID)
		}
		q, err := filter.DecodeCursor(filter.EncodeCursor(p))
		if err != nil || !q.CreatedAt.Equal(p.CreatedAt) || q.ID != p.ID {
			t.Fatalf("re-encoded cursor decodes to %+v, %v; want %+v", q, err, p)
		}
	})
}

// A dead-letter cursor resumes its own listing only: not one with other
// filters, not the notifications listing (nor the other way round).
func TestDeadLetterCursor(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 12, 0, 0, 123456000, time.UTC)
	filters := []string{"24h", "550"}
	c := EncodeDeadLetterCursor(filters, DeadLetterPosition{FailedAt: at, ID: 7})
	p, err := DecodeDeadLetterCursor(filters, c)
	require.NoError(t, err)
	require.Equal(t, DeadLetterPosition{FailedAt: at, ID: 7}, p)
	_, err = DecodeDeadLetterCursor([]string{"24h", ""}, c)
	require.ErrorIs(t, err, ErrForeignCursor)
	_, err = ListFilter{}.DecodeCursor(EncodeDeadLetterCursor(nil, p))
	require.ErrorIs(t, err, ErrForeignCursor)
	_, err = DecodeDeadLetterCursor(nil, ListFilter{}.EncodeCursor(ListPosition{CreatedAt: at, ID: 7}))
	require.ErrorIs(t, err, ErrForeignCursor)
	_, err = DecodeDeadLetterCursor(filters, c[:len(c)-2])
	require.ErrorIs(t, err, ErrBadCursor)
}
