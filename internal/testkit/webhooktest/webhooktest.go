// Package webhooktest is the receiving side of the Standard Webhooks
// signature, written from the specification and not from herald's signing
// code (internal/sender/webhook), so that the two check each other. The
// harnesses that receive herald's webhooks (the chaos harness, the bench's
// receiver, the end-to-end tests) verify with it.
package webhooktest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Tolerance is how far a webhook-timestamp may be from the receiver's
// clock, as the specification recommends.
const Tolerance = 5 * time.Minute

// NewSecret returns a fresh secret: its whsec_ form, as
// HERALD_WEBHOOK_SECRET takes it, and the key it stands for.
func NewSecret() (secret string, key []byte) {
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(fmt.Sprintf("webhooktest: read random key: %v", err))
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key), key
}

// Verify checks the signature of one webhook, given its headers and body:
// webhook-id present, webhook-timestamp within Tolerance of now, and one
// of the space-separated v1,<base64> entries of webhook-signature the
// HMAC-SHA256 under key of "id.timestamp.body". It returns why not, or nil.
func Verify(key []byte, h http.Header, body []byte, now time.Time) error {
	id, timestamp, sig := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" {
		return errors.New("no webhook-id")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not a number")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("webhook-timestamp is %s off", d.Round(time.Second))
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.", id, timestamp)
	mac.Write(body)
	want := mac.Sum(nil)
	for _, entry := range strings.Fields(sig) {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no v1 signature matches")
}
