package webhooktest

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The specification's published example: secret, id, timestamp, body and
// the signature it gives.
func TestVerifySpecificationExample(t *testing.T) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"))
	require.NoError(t, err)
	body := []byte(`{"test": 2432232314}`)
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	at := time.Unix(1614265330, 0)
	require.NoError(t, Verify(key, h, body, at))

	require.Error(t, Verify(key, h, []byte(`{"test": 2432232315}`), at), "another body")
	require.Error(t, Verify(key, h, body, at.Add(Tolerance+time.Second)), "too late")
	other := h.Clone()
	other.Set("webhook-id", "msg_other")
	require.Error(t, Verify(key, other, body, at), "another id")
	rotated := h.Clone()
	rotated.Set("webhook-signature", "v1,AAAA v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	require.NoError(t, Verify(key, rotated, body, at), "one of several entries matches")
	v2 := h.Clone()
	v2.Set("webhook-signature", "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	require.Error(t, Verify(key, v2, body, at), "only v1 entries count")
}

func TestNewSecret(t *testing.T) {
	secret, key := NewSecret()
	require.Len(t, key, 32)
	require.Equal(t, "whsec_"+base64.StdEncoding.EncodeToString(key), secret)
	s2, _ := NewSecret()
	require.NotEqual(t, secret, s2)
}
