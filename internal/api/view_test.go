package api

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// TestNewPage checks the page of a listing's JSON: items in order, [] (not
// null) when there are none, and next_cursor only when there is a next
// page.
func TestNewPage(t *testing.T) {
	for _, c := range []struct {
		items []int
		next  string
		want  string
	}{
		{nil, "", `{"items":[]}`},
		{[]int{}, "c", `{"items":[],"next_cursor":"c"}`},
		{[]int{3, 1, 2}, "", `{"items":["3","1","2"]}`},
	} {
		got, err := json.Marshal(newPage(c.items, strconv.Itoa, c.next))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("newPage(%v, %q) = %s, want %s", c.items, c.next, got, c.want)
		}
	}
}

// TestOptionalViews checks the optional fields' values: nil (JSON null)
// for an empty text or a nil time, else the value (a time in UTC).
func TestOptionalViews(t *testing.T) {
	if got := nullIfEmpty(""); got != nil {
		t.Errorf(`nullIfEmpty("") = %q, want nil`, *got)
	}
	if got := nullIfEmpty("x"); got == nil || *got != "x" {
		t.Errorf(`nullIfEmpty("x") = %v, want "x"`, got)
	}
	if got := formatTimePtr(nil); got != nil {
		t.Errorf("formatTimePtr(nil) = %q, want nil", *got)
	}
	at := time.Date(2026, 1, 2, 4, 4, 5, 500, time.FixedZone("", 3600))
	if got := formatTimePtr(&at); got == nil || *got != "2026-01-02T03:04:05.0000005Z" {
		t.Errorf("formatTimePtr(%v) = %v, want 2026-01-02T03:04:05.0000005Z", at, got)
	}
}
