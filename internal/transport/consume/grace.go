package consume

import (
	"context"
	"time"
)

// HandlerContext returns the context a consumer's handlers run in. It does
// not end with ctx but grace after it, so that a handler in flight when the
// stop begins may still settle what it started; cancel ends it at once
// (call it when the consumer returns).
func HandlerContext(ctx context.Context, grace time.Duration) (hctx context.Context, cancel context.CancelFunc) {
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(grace, hcancel)
		context.AfterFunc(hctx, func() { t.Stop() })
	})
	return hctx, func() {
		stopGrace()
		hcancel()
	}
}
