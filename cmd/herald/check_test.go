package main

import (
	"encoding/base64"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// herald serve checks every setting before it opens anything (issue 38):
// for each kind of bad setting, in an empty directory, it exits 2 with a
// message naming the setting, and the directory stays empty: no herald.db,
// no herald.mbox.
func TestServeValidatesBeforeItWrites(t *testing.T) {
	t.Parallel()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	for _, tc := range []struct {
		name    string
		env     map[string]string
		setting string // the setting the message names
	}{
		{"port out of range", map[string]string{"HERALD_HTTP_ADDR": "127.0.0.1:99999"}, "HERALD_HTTP_ADDR"},
		{"address without a port", map[string]string{"HERALD_HTTP_ADDR": "localhost"}, "HERALD_HTTP_ADDR"},
		{"numbers that are no IP", map[string]string{"HERALD_HTTP_ADDR": "999.0.0.1:8080"}, "HERALD_HTTP_ADDR"},
		{"secret without its prefix", map[string]string{"HERALD_WEBHOOK_SECRET": "s3cret"}, "HERALD_WEBHOOK_SECRET"},
		{"secret not base64", map[string]string{"HERALD_WEBHOOK_SECRET": "whsec_!!!"}, "HERALD_WEBHOOK_SECRET"},
		{"secret too short", map[string]string{"HERALD_WEBHOOK_SECRET": "whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))}, "HERALD_WEBHOOK_SECRET"},
		{"allow entry not a CIDR", map[string]string{"HERALD_WEBHOOK_ALLOW": "localhost"}, "HERALD_WEBHOOK_ALLOW"},
		{"allow prefix too long", map[string]string{"HERALD_WEBHOOK_ALLOW": "10.0.0.0/33"}, "HERALD_WEBHOOK_ALLOW"},
		{"CORS origin with a path", map[string]string{"HERALD_CORS_ORIGINS": "https://app.example.com/"}, "HERALD_CORS_ORIGINS"},
		{"allowed host", map[string]string{"HERALD_ALLOWED_HOSTS": "bad host"}, "HERALD_ALLOWED_HOSTS"},
		{"SMTP URL scheme", map[string]string{"HERALD_SMTP_URL": "http://mail.example.com"}, "HERALD_SMTP_URL"},
		{"mbox without a file", map[string]string{"HERALD_SMTP_URL": "mbox:"}, "HERALD_SMTP_URL"},
		{"CA file missing", map[string]string{"HERALD_SMTP_URL": "smtp://127.0.0.1:1", "HERALD_SMTP_CA_FILE": "/nonexistent/ca.pem"}, "HERALD_SMTP_CA_FILE"},
		{"From not an address", map[string]string{"HERALD_SMTP_FROM": "herald at example"}, "HERALD_SMTP_FROM"},
		{"status webhook without a secret", map[string]string{"HERALD_STATUS_WEBHOOK_URL": "https://ops.example.com/events"}, "HERALD_STATUS_WEBHOOK_URL"},
		{"status webhook URL", map[string]string{"HERALD_STATUS_WEBHOOK_URL": "ftp://ops.example.com/", "HERALD_WEBHOOK_SECRET": secret}, "HERALD_STATUS_WEBHOOK_URL"},
		{"bot token", map[string]string{"HERALD_TELEGRAM_BOT_TOKEN": "12 34"}, "HERALD_TELEGRAM_BOT_TOKEN"},
		{"Bot API URL", map[string]string{"HERALD_TELEGRAM_API": "ftp://api.example.com"}, "HERALD_TELEGRAM_API"},
		{"alert token alone", map[string]string{"HERALD_TELEGRAM_TOKEN": "123:abc"}, "HERALD_TELEGRAM_CHAT_ID"},
		{"debug crash point", map[string]string{"HERALD_DEBUG_FAULTS": "1", "HERALD_DEBUG_CRASH": "nowhere"}, "HERALD_DEBUG_CRASH"},
		{"database URL", map[string]string{"HERALD_DATABASE_URL": "mysql://db/herald"}, "HERALD_DATABASE_URL"},
		{"broker URL", map[string]string{"HERALD_BROKER_URL": "redis://127.0.0.1:6379"}, "HERALD_BROKER_URL"},
		{"duration", map[string]string{"HERALD_RETRY_DELAY": "soon"}, "HERALD_RETRY_DELAY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			code, out := runBin(t, dir, tc.env, "serve")
			require.Equal(t, 2, code, "a bad setting is a usage error:\n%s", out)
			require.Contains(t, out, tc.setting, "the message names the setting")
			for _, v := range tc.env {
				if strings.HasPrefix(v, "whsec_") || strings.Contains(v, ":abc") {
					require.NotContains(t, out, v, "a secret is never shown")
				}
			}
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			require.Empty(t, names, "serve left files behind:\n%s", out)
		})
	}
}
