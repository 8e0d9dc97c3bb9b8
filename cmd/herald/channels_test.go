package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// postJSON posts body to the API's /notifications and returns the status
// and the reply.
func (c client) postJSON(t *testing.T, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(c.base+"/notifications", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeWebhookAndTelegramChannels: herald serve with the webhook and
// telegram channels enabled by their settings delivers a webhook, signed
// as Standard Webhooks says (checked here by the test's own HMAC, not
// herald's), failing once with a 500 first (the same webhook-id on both
// attempts), and a Telegram message through a local server that answers
// as the Bot API does; a channel left unconfigured is a 400 naming
// channel.
func TestServeWebhookAndTelegramChannels(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)

	type hook struct{ id, ts, sig, body string }
	var mu sync.Mutex
	var hooks []hook
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hooks = append(hooks, hook{r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), string(b)})
		first := len(hooks) == 1
		mu.Unlock()
		if first {
			http.Error(w, "not yet", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	var tgMu sync.Mutex
	var tg []map[string]any
	botAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/sendMessage") || !strings.HasPrefix(r.URL.Path, "/bot123:secret-token/") {
			http.Error(w, `{"ok":false,"error_code":404,"description":"Not Found"}`, http.StatusNotFound)
			return
		}
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		tgMu.Lock()
		tg = append(tg, m)
		tgMu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true,"result":{"message_id":1}}`)
	}))
	t.Cleanup(botAPI.Close)

	dir := t.TempDir()
	addr := freeAddr(t)
	p := startHerald(t, dir, map[string]string{
		"HERALD_HTTP_ADDR":          addr,
		"HERALD_RETRY_DELAY":        "200ms",
		"HERALD_WEBHOOK_SECRET":     secret,
		"HERALD_WEBHOOK_ALLOW":      "127.0.0.0/8",
		"HERALD_TELEGRAM_BOT_TOKEN": "123:secret-token",
		"HERALD_TELEGRAM_API":       botAPI.URL,
	}, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	status, body := api.postJSON(t, fmt.Sprintf(`{"user_id":"u1","channel":"webhook","to":%q,"body":{"event":"order.paid","id":7}}`, receiver.URL+"/hooks"))
	require.Equal(t, http.StatusCreated, status, body)
	var wh struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &wh))
	status, body = api.postJSON(t, `{"user_id":"u1","channel":"telegram","to":"-1001234567890","body":"Your order shipped"}`)
	require.Equal(t, http.StatusCreated, status, body)
	var tm struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &tm))

	require.Eventually(t, func() bool { return api.get(t, wh.ID).Status == "sent" && api.get(t, tm.ID).Status == "sent" },
		20*time.Second, 20*time.Millisecond, "both sent:\n%s", p.LogTail(30))
	require.Equal(t, 2, api.get(t, wh.ID).Attempts, "one failed attempt, then sent")

	mu.Lock()
	got := append([]hook(nil), hooks...)
	mu.Unlock()
	require.Len(t, got, 2)
	require.Equal(t, "msg_"+wh.ID, got[0].id)
	for _, h := range got {
		require.Equal(t, got[0].id, h.id, "the same webhook-id on every attempt")
		require.JSONEq(t, `{"event":"order.paid","id":7}`, h.body)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(h.id + "." + h.ts + "." + h.body))
		require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), h.sig, "the signature verifies")
	}

	tgMu.Lock()
	require.Len(t, tg, 1)
	require.Equal(t, "Your order shipped", tg[0]["text"])
	tgMu.Unlock()
	require.False(t, p.LogContains("secret-token"), "the bot token is never logged")

	// A refused destination at create, without anything written.
	status, body = api.postJSON(t, `{"user_id":"u1","channel":"webhook","to":"http://169.254.169.254/latest","body":{}}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, `"field":"to"`)
	// A legacy spelling of an IPv4 address, whatever the resolver would
	// make of it, even of one HERALD_WEBHOOK_ALLOW opens (issue 33).
	for _, to := range []string{"http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://127.1/", "http://127.0.0.1./", "http://[64:ff9b:1::a9fe:a9fe]/"} {
		status, body = api.postJSON(t, fmt.Sprintf(`{"user_id":"u1","channel":"webhook","to":%q,"body":{}}`, to))
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", to, body)
		require.Contains(t, body, `"field":"to"`, to)
	}
}

// TestServeUnconfiguredChannelRefused: without its settings a channel is
// not enabled; the API refuses it, naming the field, the setting that
// enables it (issue 38) and the channels it takes.
func TestServeUnconfiguredChannelRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	startHerald(t, dir, map[string]string{"HERALD_HTTP_ADDR": addr}, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")
	for channel, setting := range map[string]string{"webhook": "HERALD_WEBHOOK_SECRET", "telegram": "HERALD_TELEGRAM_BOT_TOKEN"} {
		status, body := api.postJSON(t, fmt.Sprintf(`{"user_id":"u1","channel":%q,"to":"https://example.com/h","body":"b"}`, channel))
		require.Equal(t, http.StatusBadRequest, status, body)
		require.Contains(t, body, `"field":"channel"`)
		require.Contains(t, body, "set "+setting+" on the API and on the workers to enable it", channel)
		require.Contains(t, body, `enabled: \"email\"`)
	}
}

// The setting a channel's refusal names is the one that enables it: in
// the settings table, its help says it enables the channel, and setting
// it alone enables it.
func TestChannelEnabledByItsSetting(t *testing.T) {
	t.Parallel()
	for _, k := range channelKinds {
		if k.enabled == nil {
			continue
		}
		var row *setting
		for i := range settings {
			if settings[i].env == k.enabledBy {
				row = &settings[i]
			}
		}
		require.NotNil(t, row, "%s: %s is a setting", k.name, k.enabledBy)
		require.Contains(t, row.usage, "enables the channel "+k.name)
		var cfg Config
		require.False(t, k.enabled(cfg), k.name)
		// A value the setting's own check accepts.
		v := map[string]string{"webhook": "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")), "telegram": "123:abc"}[k.name]
		require.NoError(t, row.set(&cfg, v), k.name)
		require.True(t, k.enabled(cfg), "%s enables %s", k.enabledBy, k.name)
		require.Contains(t, disabledChannels(Config{})[k.name], k.enabledBy)
	}
}
