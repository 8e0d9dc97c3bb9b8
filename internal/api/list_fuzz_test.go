package api

import (
	"net/url"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/internal/notify"
)

// FuzzListQuery feeds arbitrary query strings to the parser of GET
// /notifications: it never panics; a refusal is a 400 naming a field with
// one of the API's codes; an accepted query is a filter the stores can run
// (a limit from 1 to 500, a known status, a clean user id, a non-empty
// window), and a cursor issued for it resumes at the same position.
func FuzzListQuery(f *testing.F) {
	valid := notify.ListFilter{UserID: "u-1", Status: notify.StatusPending}
	cursor := valid.EncodeCursor(notify.ListPosition{CreatedAt: time.Date(2026, 5, 1, 12, 0, 0, 123456000, time.UTC), ID: 42})
	for _, s := range []string{
		"", "limit=50", "limit=501", "limit=0", "limit=-1", "limit=1e3", "status=sent", "status=lost",
		"user_id=u-1&status=pending&cursor=" + url.QueryEscape(cursor), "cursor=" + url.QueryEscape(cursor),
		"created_after=2026-01-01T00:00:00Z&created_before=2026-01-02T00:00:00%2B01:00",
		"created_after=0000-01-01T00:00:00%2B01:00", "user_id=%FF", "user_id=%00", "x=1", "limit=1&limit=2", "a;b",
		"channel=webhook&status=failed", "channel=sms", "channel=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw) // what r.URL.Query() keeps of a bad query
		lf, e := parseListQuery(q, fuzzChannels)
		if e != nil {
			switch e.Code {
			case "invalid_field", "unknown_field", "invalid_cursor":
			default:
				t.Fatalf("unknown code %q", e.Code)
			}
			if e.Field == "" || e.Message == "" || !utf8.ValidString(e.Field) {
				t.Fatalf("a refusal must name its field: %+v", e)
			}
			return
		}
		if lf.Limit < 1 || lf.Limit > MaxListLimit {
			t.Fatalf("limit %d accepted", lf.Limit)
		}
		switch lf.Status {
		case "", notify.StatusPending, notify.StatusSent, notify.StatusFailed:
		default:
			t.Fatalf("status %q accepted", lf.Status)
		}
		if _, ok := fuzzChannels[lf.Channel]; !ok && lf.Channel != "" {
			t.Fatalf("channel %q accepted", lf.Channel)
		}
		if checkQueryText("user_id", lf.UserID, notify.MaxUserIDLen) != nil && lf.UserID != "" {
			t.Fatalf("user_id %q accepted", lf.UserID)
		}
		if !lf.CreatedAfter.IsZero() && !lf.CreatedBefore.IsZero() && !lf.CreatedBefore.After(lf.CreatedAfter) {
			t.Fatalf("an empty window accepted")
		}
		if lf.After != nil && lf.After.ID <= 0 {
			t.Fatalf("a cursor at id %d accepted", lf.After.ID)
		}
		p := notify.ListPosition{CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 1000, time.UTC), ID: 7}
		again, _ := url.ParseQuery(raw)
		again.Set("cursor", lf.EncodeCursor(p))
		lf2, e := parseListQuery(again, fuzzChannels)
		if e != nil {
			t.Fatalf("a cursor issued for the query is refused: %+v", e)
		}
		if !lf2.After.CreatedAt.Equal(p.CreatedAt) || lf2.After.ID != p.ID {
			t.Fatalf("the cursor resumes at %+v, want %+v", *lf2.After, p)
		}
	})
}

// fuzzChannels are the channels a listing may filter on in the fuzz run.
var fuzzChannels = notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": {}}
