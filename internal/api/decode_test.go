package api

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/heraldhq/herald/internal/notify"
)

// FuzzDecodeCreateRequest feeds arbitrary bodies to the strict create
// decoder: it never panics, every error carries one of the API's codes, and
// a body it accepts re-encodes to an equivalent request.
func FuzzDecodeCreateRequest(f *testing.F) {
	f.Add([]byte(`{"user_id":"u1","channel":"email","to":"a@example.com","subject":"s","body":"b"}`))
	f.Add([]byte(`{"to":"a@example.com","TO":"b@example.com"}`))
	f.Add([]byte(`{"to":"a","to":"b"}`))
	f.Add([]byte(`{"subject":"\ud800"}`))
	f.Add([]byte(`{"user_id":1}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte("\xff"))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"channel":"webhook","body":{"a":[1, true, null]}}`))
	f.Add([]byte(`{"channel":"email","body":{"a":1}}`))
	// A channel that takes a JSON body (webhook) holds any JSON value as
	// its compact text; a string stays itself, so the round trip holds.
	channels := notify.Channels{notify.ChannelEmail: notify.EmailSpec, "webhook": {JSONBody: true}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, e := decodeCreate(raw, channels)
		if e != nil {
			switch e.Code {
			case "invalid_utf8", "invalid_json", "unknown_field", "invalid_field":
			default:
				t.Fatalf("unknown code %q", e.Code)
			}
			return
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		back, e := decodeCreate(again, channels)
		if e != nil || !reflect.DeepEqual(back, req) {
			t.Fatalf("accepted %q but its re-encoding %q decodes to %+v, %v", raw, again, back, e)
		}
	})
}
