package api

import (
	"encoding/json"
	"strconv"
	"testing"
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
