package api

import (
	"context"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// BacklogStats reports the outbox backlog. The stores implement it.
type BacklogStats interface {
	OutboxStats(ctx context.Context) (notify.OutboxStats, error)
}

// BacklogGate returns an Admission func that refuses creates (429 with
// Retry-After) while more than max outbox rows are unprocessed, status
// events not counted (they wait for their own relay, not a delivery): an honest
// "not now" instead of a queue that grows without bound. It reads the
// backlog at most once per ttl, whatever the request rate. When the backlog
// cannot be read it admits, and the create itself reports the store's state.
func BacklogGate(stats BacklogStats, max int64, ttl time.Duration) func(context.Context) error {
	g := &backlogGate{stats: stats, max: max, ttl: ttl}
	return g.admit
}

type backlogGate struct {
	stats BacklogStats
	max   int64
	ttl   time.Duration

	mu      sync.Mutex
	checked time.Time
	over    bool
}

func (g *backlogGate) admit(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.checked) >= g.ttl {
		s, err := g.stats.OutboxStats(ctx)
		if err != nil {
			return nil
		}
		g.checked = time.Now()
		// The status events are not deliveries: a status webhook that is
		// down must not turn creates away.
		g.over = s.Unprocessed-s.UnprocessedStatus > g.max
	}
	if g.over {
		return &RetryAfterError{After: time.Second}
	}
	return nil
}
