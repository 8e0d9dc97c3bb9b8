package consume

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHandlerContextOutlivesCtxByGrace(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	hctx, cancel := HandlerContext(ctx, time.Hour)
	defer cancel()
	stop()
	<-ctx.Done()
	require.NoError(t, hctx.Err(), "the handlers' context must outlive ctx during the grace")
	cancel()
	require.ErrorIs(t, hctx.Err(), context.Canceled, "cancel ends it at once")
}

func TestHandlerContextEndsAfterGrace(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	hctx, cancel := HandlerContext(ctx, time.Millisecond)
	defer cancel()
	require.NoError(t, hctx.Err())
	stop()
	require.Eventually(t, func() bool { return hctx.Err() != nil }, 10*time.Second, time.Millisecond,
		"the handlers' context must end once the grace has passed")
}

func TestHandlerContextKeepsValues(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "v")
	hctx, cancel := HandlerContext(ctx, time.Hour)
	defer cancel()
	require.Equal(t, "v", hctx.Value(key{}))
}
