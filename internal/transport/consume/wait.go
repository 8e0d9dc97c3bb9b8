package consume

import (
	"context"
	"time"
)

// Sleep pauses for d, or until ctx ends. It reports false when ctx ended
// first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Every calls tick every d, and at once whenever wake receives (a nil wake
// never does), until ctx ends or tick returns false. A tick that takes
// longer than d is not caught up on: the next one follows it once.
func Every(ctx context.Context, d time.Duration, wake <-chan struct{}, tick func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		if !tick() {
			return
		}
	}
}
