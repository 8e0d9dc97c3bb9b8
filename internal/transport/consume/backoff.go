package consume

import (
	"context"
	"time"
)

// Backoff is the pause between a consumer's attempts to (re)connect: Min
// at first and after Reset, doubled by every Wait up to Max. The zero
// Backoff with Min and Max set starts at Min. It is not safe for concurrent
// use: one loop owns it.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Current is the pause the next Wait takes (for the log line before it).
func (b *Backoff) Current() time.Duration {
	if b.cur <= 0 {
		return b.Min
	}
	return b.cur
}

// Wait pauses for Current, or until ctx ends, and doubles the next pause
// (up to Max). It reports false when ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	d := b.Current()
	b.cur = min(d*2, b.Max)
	return Sleep(ctx, d)
}

// Reset makes the next pause Min again (the last attempt got through).
func (b *Backoff) Reset() { b.cur = 0 }
