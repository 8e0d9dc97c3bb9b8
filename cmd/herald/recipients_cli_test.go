package main

import (
	"encoding/json"
	"maps"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	apiclient "github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// herald recipients put takes one flag per registered channel's address
// field, named after it, and the API stores each address under its
// channel; a flag left out empties its field, and a bad address is the
// API's refusal naming the field.
func TestRecipientsPutCommand(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(t.Context()))
	known, err := knownChannelSpecs(Config{})
	require.NoError(t, err)
	a, err := api.New(st, api.Config{Token: "t0k", Recipients: st, KnownChannels: known})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	env := map[string]string{"HERALD_API_URL": srv.URL, "HERALD_API_TOKEN": "t0k"}
	run := func(args ...string) map[string]any {
		t.Helper()
		out, errOut, err := cliEnv(t, env, args...)
		require.NoError(t, err, errOut)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &m), out)
		return m
	}

	got := run("recipients", "put", "u-1", "--email", "ada@example.com", "--telegram-chat-id", "-1001234567890",
		"--webhook-url", "https://hooks.example.com/u-1", "--locale", "de")
	require.Equal(t, "ada@example.com", got["email"])
	require.Equal(t, "-1001234567890", got["telegram_chat_id"])
	require.Equal(t, "https://hooks.example.com/u-1", got["webhook_url"])
	rec, err := st.Recipient(t.Context(), "u-1")
	require.NoError(t, err)
	require.Equal(t, map[string]string{notify.ChannelEmail: "ada@example.com", "telegram": "-1001234567890",
		"webhook": "https://hooks.example.com/u-1"}, rec.Addresses)
	require.Equal(t, "de", rec.Locale)

	got = run("recipients", "put", "u-1", "--telegram-chat-id", "@herald_news")
	require.Equal(t, "", got["email"], "a flag left out empties its field")
	require.Equal(t, got, run("recipients", "get", "u-1"))
	rec, err = st.Recipient(t.Context(), "u-1")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"telegram": "@herald_news"}, rec.Addresses)

	_, _, err = cliEnv(t, env, "recipients", "put", "u-1", "--webhook-url", "http://127.0.0.1/hook")
	require.Error(t, err)
	require.Contains(t, err.Error(), "webhook_url")

	out, _, err := cliEnv(t, env, "recipients", "--help")
	require.NoError(t, err)
	for _, f := range known.RecipientFields() {
		require.Contains(t, out, "[--"+strings.ReplaceAll(f.Field, "_", "-")+" ADDRESS]")
	}
}

// Every registered channel's recipient field (notify.ChannelSpec's
// RecipientField, set beside the channel's registration) is a field of
// the documents that spell the recipient out: the OpenAPI document's
// Recipient and RecipientRequest, in channel name order between user_id
// and locale, and the Go client's Recipient. A new channel's field shows
// up here first.
func TestRecipientFieldsDocumented(t *testing.T) {
	t.Parallel()
	var fields []string
	for _, f := range registeredSpecs().RecipientFields() {
		fields = append(fields, f.Field)
	}
	require.Equal(t, []string{"email", "telegram_chat_id", "webhook_url"}, fields, "the fields of the channels registered today")

	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(readRepoFile(t, "internal/api/openapi.json")), &doc))
	want := append(append([]string{"user_id"}, fields...), "locale", "time_zone", "revision", "updated_at")
	rec := doc.Components.Schemas["Recipient"]
	require.Equal(t, want, rec.Required, "internal/api/openapi.json, Recipient.required: every field, in the order GET answers them")
	require.ElementsMatch(t, want, slices.Collect(maps.Keys(rec.Properties)), "internal/api/openapi.json, Recipient.properties")
	require.ElementsMatch(t, append(append([]string{}, fields...), "locale", "time_zone"), slices.Collect(maps.Keys(doc.Components.Schemas["RecipientRequest"].Properties)),
		"internal/api/openapi.json, RecipientRequest.properties: the keys PUT takes")

	var tags []string
	typ := reflect.TypeFor[apiclient.Recipient]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		tags = append(tags, name)
	}
	require.Equal(t, want, tags, "client/recipients.go, Recipient: the typed client has a field for every channel's address, in the API's order")

	// docs/design.md's routes table names the keys a PUT takes.
	var row string
	for _, line := range strings.Split(readRepoFile(t, "docs/design.md"), "\n") {
		if strings.HasPrefix(line, "| `PUT /recipients/{user_id}` |") {
			row = line
		}
	}
	require.NotEmpty(t, row, "docs/design.md: the routes table has no PUT /recipients/{user_id} row")
	quoted := make([]string, 0, len(fields)+2)
	for _, f := range append(append([]string{}, fields...), "locale", "time_zone") {
		quoted = append(quoted, `"`+f+`"`)
	}
	require.Contains(t, row, "{"+strings.Join(quoted, ", ")+"}", "docs/design.md: the PUT /recipients/{user_id} row lists every key a PUT takes, in the API's order")
}
