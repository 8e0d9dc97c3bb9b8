package consume

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

func TestDeliveredSettlesOnceUnderTheMessageID(t *testing.T) {
	d := Delivered{Msg: notify.Message{ID: 42}}
	require.Equal(t, int64(42), d.Message().ID)
	require.NoError(t, d.Settle("ack", func() error { return nil }))
	require.EqualError(t, d.Settle("retry", func() error { return nil }), "retry message 42: already settled")
	require.True(t, d.Once.Settled())
}
