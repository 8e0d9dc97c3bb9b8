package notify

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPreferenceLink(t *testing.T) {
	t.Parallel()
	key := []byte("k1")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in := PreferenceLink{UserID: "u 42", Category: "news", Channel: "email", Expires: now.Add(time.Hour)}
	tok := SignPreferenceLink(key, in)
	got, err := VerifyPreferenceLink(key, tok, now)
	require.NoError(t, err)
	require.Equal(t, "u 42", got.UserID)
	require.Equal(t, "news", got.Category)
	require.Equal(t, "email", got.Channel)
	require.True(t, got.Expires.Equal(in.Expires))

	payload, sig, _ := strings.Cut(tok, ".")
	other := SignPreferenceLink(key, PreferenceLink{UserID: "u 43", Category: "news", Channel: "email", Expires: in.Expires})
	otherPayload, _, _ := strings.Cut(other, ".")
	for name, bad := range map[string]string{
		"other key":       SignPreferenceLink([]byte("k2"), in),
		"payload swapped": otherPayload + "." + sig,
		"no signature":    payload,
		"empty":           "",
		"bad base64":      payload + ".!!",
		"truncated sig":   payload + "." + sig[:10],
	} {
		_, err := VerifyPreferenceLink(key, bad, now)
		require.ErrorIs(t, err, ErrBadLink, name)
	}
	_, err = VerifyPreferenceLink(key, tok, in.Expires)
	require.ErrorIs(t, err, ErrBadLink, "expired")
	_, err = VerifyPreferenceLink(nil, tok, now)
	require.ErrorIs(t, err, ErrBadLink, "no key")
}

func TestPreferencesAllows(t *testing.T) {
	t.Parallel()
	p := Preferences{"news": {"email": false, "telegram": true}}
	require.False(t, p.Allows("news", "email"))
	require.True(t, p.Allows("news", "telegram"))
	require.True(t, p.Allows("news", "webhook"))
	require.True(t, p.Allows("other", "email"))
	require.True(t, Preferences(nil).Allows("news", "email"))
}
