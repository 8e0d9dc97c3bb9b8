package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// botAPIRefusing is a Telegram Bot API whose sendMessage answers 400
// "chat not found" (a permanent failure: dead-lettered at once), and
// the texts it was sent.
func botAPIRefusing(t *testing.T) (url string, texts func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		mu.Lock()
		got = append(got, fmt.Sprint(m["text"]))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// fallbackEnv is the settings a fallback test adds: the telegram channel,
// on a Bot API at botURL.
func fallbackEnv(botURL string) map[string]string {
	return map[string]string{"HERALD_TELEGRAM_BOT_TOKEN": "123:secret-token", "HERALD_TELEGRAM_API": botURL}
}

// runFallback is issue 35's fallback scenario against a herald API at
// base: a create with channels telegram then email goes to Telegram,
// whose Bot API refuses the chat; the dead letter makes the email hop,
// a notification of its own linked both ways, which a real SMTP server
// receives with the template's email variant.
func runFallback(t *testing.T, base string, smtp *smtptest.Server, texts func() []string) (firstID string) {
	call := func(method, path, body string) map[string]any {
		t.Helper()
		return call(t, base, method, path, body)
	}
	call("PUT", "/templates/shipped", `{"channel":"telegram","text":"Order {{.order}} shipped (telegram)"}`)
	call("PUT", "/templates/shipped", `{"channel":"email","subject":"Order {{.order}} shipped","text":"Order {{.order}} is on its way."}`)
	call("PUT", "/recipients/u-fb", `{"email":"fb@example.com","telegram_chat_id":"-1001234567890"}`)
	first := call("POST", "/notifications", `{"user_id":"u-fb","channels":["telegram","email"],"template":"shipped","data":{"order":"A-7"}}`)
	require.Equal(t, "telegram", first["channel"])
	require.Equal(t, []any{"email"}, first["fallback_channels"])
	id := first["id"].(string)

	var got map[string]any
	require.Eventually(t, func() bool {
		got = call("GET", "/notifications/"+id, "")
		return got["status"] == "failed" && got["fallback_next"] != nil
	}, 60*time.Second, 50*time.Millisecond, "the telegram message is dead-lettered and falls back")
	require.Contains(t, got["last_error"], "chat not found")
	hopID := got["fallback_next"].(string)
	var hop map[string]any
	require.Eventually(t, func() bool {
		hop = call("GET", "/notifications/"+hopID, "")
		return hop["status"] == "sent"
	}, 60*time.Second, 50*time.Millisecond, "the email hop is sent")
	require.Equal(t, "email", hop["channel"])
	require.Equal(t, "fb@example.com", hop["to"])
	require.Equal(t, id, hop["fallback_of"])
	require.NotContains(t, hop, "fallback_channels", "the last hop")

	msgs := smtp.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, []string{"fb@example.com"}, msgs[0].To)
	require.Equal(t, "Order A-7 shipped", msgs[0].Subject)
	require.Equal(t, "<"+hopID+"@example.com>", msgs[0].MessageID)
	require.Contains(t, string(msgs[0].Data), "Order A-7 is on its way.")
	require.Equal(t, []string{"Order A-7 shipped (telegram)"}, texts(), "telegram was tried once: a permanent refusal")
	return id
}

// TestFallbackTelegramToEmail: the fallback scenario on both shapes
// (herald serve on SQLite; herald api, relay and worker on PostgreSQL and
// RabbitMQ), and, on the embedded one, the command line: a fallback
// create through the API, and show.
func TestFallbackTelegramToEmail(t *testing.T) {
	onEachShape(t, func(t *testing.T, sh shape) {
		botURL, texts := botAPIRefusing(t)
		r := sh.start(t, fallbackEnv(botURL))
		first := runFallback(t, r.base, r.smtp, texts)
		if sh.name != "embedded" {
			return
		}
		env := func(string) string { return "" }
		herald := func(args ...string) (string, error) {
			var out bytes.Buffer
			err := run(t.Context(), args, env, &out, &out)
			return out.String(), err
		}
		out, err := herald("notifications", "create", "--api-url", r.base, "--user-id", "u-fb", "--channels", "telegram,email",
			"--template", "shipped", "--data", `{"order":"A-8"}`, "--json")
		require.NoError(t, err, out)
		var n struct {
			Channel          string   `json:"channel"`
			FallbackChannels []string `json:"fallback_channels"`
		}
		require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &n), out)
		require.Equal(t, "telegram", n.Channel)
		require.Equal(t, []string{"email"}, n.FallbackChannels)
		out, err = herald("notifications", "show", "--api-url", r.base, first)
		require.NoError(t, err, out)
		require.Regexp(t, `(?m)^fallback_next\s+[0-9]+$`, out)
		_, err = herald("notifications", "create", "--database-url", "sqlite:"+filepath.Join(r.dir, "herald.db"), "--user-id", "u-fb",
			"--channels", "telegram,email", "--template", "shipped")
		require.ErrorContains(t, err, "give --api-url")
	})
}
