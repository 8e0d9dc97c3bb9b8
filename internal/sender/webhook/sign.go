package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// secretPrefix begins a Standard Webhooks secret: whsec_<base64 of the key>.
const secretPrefix = "whsec_"

// minKeyLen is the shortest key accepted, the Standard Webhooks minimum.
const minKeyLen = 24

// parseSecrets reads HERALD_WEBHOOK_SECRET: one or more whsec_ secrets,
// comma-separated. Its errors name a secret by position, never its value.
func parseSecrets(s string) ([][]byte, error) {
	var keys [][]byte
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		where := fmt.Sprintf("webhook secret %d of %d", i+1, len(parts))
		rest, ok := strings.CutPrefix(p, secretPrefix)
		if !ok {
			return nil, fmt.Errorf("%s: must have the form whsec_<base64>", where)
		}
		key, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("%s: the part after whsec_ is not standard base64", where)
		}
		if len(key) < minKeyLen {
			return nil, fmt.Errorf("%s: the key is %d bytes, at least %d are needed", where, len(key), minKeyLen)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// messageID is the webhook-id of a notification: the same on every
// attempt, so that a receiver drops repeats.
func messageID(notificationID string) string { return "msg_" + notificationID }

// signature is the webhook-signature header for id, timestamp and body:
// v1,<base64 HMAC-SHA256 of "id.timestamp.body"> under key.
func signature(key []byte, id string, timestamp int64, body string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte{'.'})
	mac.Write([]byte(body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
