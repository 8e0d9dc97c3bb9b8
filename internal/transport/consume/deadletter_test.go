package consume

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDeadLetterNotification(t *testing.T) {
	for body, want := range map[string]int64{
		`{"notification_id":"42","channel":"email"}`: 42,
		`{"notification_id":"42","unknown":true}`:    42, // lenient: extra fields are fine
		`{"notification_id":"-1"}`:                   0,
		`{"notification_id":42}`:                     0,
		`{"channel":"email"}`:                        0,
		`{"notification_id":"42"`:                    0, // cut short
		``:                                           0,
	} {
		id, ok := DeadLetterNotification([]byte(body))
		require.Equal(t, want, id, body)
		require.Equal(t, want != 0, ok, body)
	}
}

func TestNamesOneOf(t *testing.T) {
	named := NamesOneOf([]int64{7, 42})
	require.True(t, named([]byte(`{"notification_id":"42"}`)))
	require.False(t, named([]byte(`{"notification_id":"43"}`)))
	require.False(t, named([]byte(`not json`)))
	require.False(t, NamesOneOf(nil)([]byte(`{"notification_id":"42"}`)))
}
