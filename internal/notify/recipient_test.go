package notify_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// The recipient fields are those of the channels that name one, in
// channel name order, whatever the map's order.
func TestRecipientFields(t *testing.T) {
	t.Parallel()
	cs := notify.Channels{
		"webhook":           {RecipientField: "webhook_url"},
		notify.ChannelEmail: notify.EmailSpec,
		"telegram":          {RecipientField: "telegram_chat_id"},
		"internal":          {},
	}
	require.Equal(t, []notify.RecipientField{{Channel: "email", Field: "email"}, {Channel: "telegram", Field: "telegram_chat_id"},
		{Channel: "webhook", Field: "webhook_url"}}, cs.RecipientFields())
	require.Empty(t, notify.Channels{"internal": {}}.RecipientFields())
}

// The stores' encoding of the addresses leaves the empty ones out, and
// reads back what it wrote; none is {} written and nil read.
func TestAddressesEncoding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   map[string]string
		json string
		back map[string]string
	}{
		{nil, `{}`, nil},
		{map[string]string{"email": ""}, `{}`, nil},
		{map[string]string{"email": "a@example.com", "telegram": "", "pigeon": "loft \"7\""}, `{"email":"a@example.com","pigeon":"loft \"7\""}`,
			map[string]string{"email": "a@example.com", "pigeon": "loft \"7\""}},
	} {
		b := notify.EncodeAddresses(tc.in)
		require.JSONEq(t, tc.json, string(b))
		back, err := notify.DecodeAddresses(b)
		require.NoError(t, err)
		require.Equal(t, tc.back, back)
		require.Equal(t, tc.back, notify.CompactAddresses(tc.in))
	}
	_, err := notify.DecodeAddresses([]byte(`{"email":1}`))
	require.Error(t, err)
	require.Empty(t, notify.Recipient{}.Address("email"), "no addresses at all")
}
