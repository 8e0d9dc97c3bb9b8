package provider_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/bench"
	"github.com/heraldhq/herald/internal/bench/provider"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/telegram"
	"github.com/heraldhq/herald/internal/sender/webhook"
)

func newReceiver(t *testing.T, rc provider.Config) *provider.Server {
	t.Helper()
	r, err := provider.New(rc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// post sends one webhook to the receiver with the given headers.
func post(t *testing.T, url string, body []byte, header map[string]string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// The receiver counts herald's own webhooks by notification, and refuses
// to count (and reports) one whose signature or timestamp is wrong.
func TestReceiverChecksWebhookSignatures(t *testing.T) {
	t.Parallel()
	secret := provider.NewWebhookSecret()
	rcv := newReceiver(t, provider.Config{Secret: secret})
	s, err := webhook.New(webhook.Config{Secret: secret, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	require.NoError(t, err)
	defer s.Close()
	for _, id := range []string{"n1", "n2", "n1"} {
		require.NoError(t, s.Send(t.Context(), notify.Outgoing{NotificationID: id, Channel: "webhook", To: rcv.WebhookURL(), Body: string(bench.WebhookBody(1))}))
	}
	require.Equal(t, map[string]int{"n1": 2, "n2": 1}, rcv.Received())
	require.NoError(t, rcv.Check())

	// Signed by another key: answered (the run goes on), not counted,
	// reported.
	other, err := webhook.New(webhook.Config{Secret: provider.NewWebhookSecret(), Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	require.NoError(t, err)
	defer other.Close()
	require.NoError(t, other.Send(t.Context(), notify.Outgoing{NotificationID: "forged", Channel: "webhook", To: rcv.WebhookURL(), Body: `{}`}))
	require.NotContains(t, rcv.Received(), "forged")
	require.ErrorContains(t, rcv.Check(), `1 webhooks failed the signature check, the first: webhook-id "msg_forged"`)

	// A good signature on an old timestamp, by hand.
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	ts := time.Now().Add(-time.Hour).Unix()
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("msg_old." + strconv.FormatInt(ts, 10) + ".{}"))
	post(t, rcv.WebhookURL(), []byte("{}"), map[string]string{
		"webhook-id": "msg_old", "webhook-timestamp": strconv.FormatInt(ts, 10),
		"webhook-signature": "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)),
	})
	require.NotContains(t, rcv.Received(), "old")
	require.ErrorContains(t, rcv.Check(), "2 webhooks failed")

	rcv.Reset()
	require.Empty(t, rcv.Received())
	require.Error(t, rcv.Check(), "a reset keeps the bad signatures")
}

// The receiver answers after its latency, on the webhook and raw paths.
func TestReceiverLatency(t *testing.T) {
	t.Parallel()
	const latency = 60 * time.Millisecond
	rcv := newReceiver(t, provider.Config{Latency: latency, Secret: provider.NewWebhookSecret()})
	start := time.Now()
	post(t, rcv.RawURL(), bench.WebhookBody(0), nil)
	require.GreaterOrEqual(t, time.Since(start), latency)
	require.Empty(t, rcv.Received(), "the raw path counts nothing")
	require.NoError(t, rcv.Check(), "nor checks anything")

	_, err := provider.New(provider.Config{Latency: -time.Second})
	require.Error(t, err)
	_, err = provider.New(provider.Config{Secret: "not-a-secret"})
	require.Error(t, err)
}

// herald's telegram sender gets the Bot API's answers from the receiver:
// getMe and sendMessage with the run's token, 401 with another.
func TestReceiverSpeaksTheBotAPI(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, provider.Config{BotToken: "100:good"})
	s, err := telegram.New(telegram.Config{Token: "100:good", APIBase: rcv.BotAPI()})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Probe(t.Context()))
	for _, text := range []string{"one", "two", "one"} {
		require.NoError(t, s.Send(t.Context(), notify.Outgoing{NotificationID: "x", Channel: "telegram", To: "4242", Body: text}))
	}
	total, distinct := rcv.Messages()
	require.Equal(t, 3, total)
	require.Equal(t, 2, distinct)

	bad, err := telegram.New(telegram.Config{Token: "100:bad", APIBase: rcv.BotAPI()})
	require.NoError(t, err)
	defer bad.Close()
	err = bad.Send(context.Background(), notify.Outgoing{NotificationID: "y", Channel: "telegram", To: "4242", Body: "three"})
	require.True(t, notify.IsSenderDown(err), "a wrong token is the provider refusing us: %v", err)
	total, _ = rcv.Messages()
	require.Equal(t, 3, total)
}
