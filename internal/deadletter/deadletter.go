// Package deadletter lets an operator inspect dead letters (notifications in
// status failed) and redrive them: each goes back to pending with a fresh
// outbox event, in one transaction per notification, and is then delivered
// under the normal rules.
package deadletter

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
)

// Letters keeps the dead letters. The stores implement it.
type Letters interface {
	// DeadLetters lists failed notifications matching f, newest first.
	DeadLetters(ctx context.Context, f notify.DeadLetterFilter) ([]notify.Notification, error)
	// Redrive moves one failed notification back to pending and writes a
	// fresh outbox event for it, in one transaction. It reports false, and
	// writes nothing, for a notification that is not failed (a sent one is
	// never sent again).
	Redrive(ctx context.Context, id int64) (bool, error)
}

// Queue is the broker's dead-letter queue, when there is a broker.
type Queue interface {
	// Remove deletes the dead-letter messages of these notifications and
	// returns how many it removed.
	Remove(ctx context.Context, notificationIDs []int64) (int, error)
}

// ErrNoSelection is returned by Redrive when the selection is empty: neither
// ids, nor "all", nor a filter. Redriving everything must be asked for.
var ErrNoSelection = errors.New("select dead letters to redrive: ids, all, or a filter (since, error, limit)")

// Service inspects and redrives dead letters.
type Service struct {
	store Letters
	queue Queue
}

// New returns a Service. queue may be nil (the table transport keeps its
// dead letters in the database only).
func New(store Letters, queue Queue) *Service { return &Service{store: store, queue: queue} }

// List returns the dead letters matching f, newest first.
func (s *Service) List(ctx context.Context, f notify.DeadLetterFilter) ([]notify.Notification, error) {
	ns, err := s.store.DeadLetters(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return ns, nil
}

// Redrive redrives the selected dead letters, one transaction each, then
// removes their messages from the broker's dead-letter queue.
func (s *Service) Redrive(ctx context.Context, sel notify.RedriveSelection) (notify.RedriveResult, error) {
	if sel.Empty() {
		return notify.RedriveResult{}, ErrNoSelection
	}
	ns, err := s.store.DeadLetters(ctx, sel.Filter)
	if err != nil {
		return notify.RedriveResult{}, fmt.Errorf("select dead letters: %w", err)
	}
	res := notify.RedriveResult{Selected: len(ns), DryRun: sel.DryRun, Redriven: []int64{}, Skipped: []int64{}}
	if sel.DryRun {
		for _, n := range ns {
			res.Redriven = append(res.Redriven, n.ID)
		}
		return res, nil
	}
	for i, n := range ns {
		ok, err := s.store.Redrive(ctx, n.ID)
		if err != nil {
			return res, fmt.Errorf("redrive notification %d: %w", n.ID, err)
		}
		if ok {
			res.Redriven = append(res.Redriven, n.ID)
		} else {
			res.Skipped = append(res.Skipped, n.ID)
		}
		if sel.Progress != nil {
			sel.Progress(i+1, len(ns))
		}
	}
	if s.queue != nil && len(res.Redriven) > 0 {
		removed, err := s.queue.Remove(ctx, res.Redriven)
		res.RemovedFromQueue = removed
		if err != nil {
			return res, fmt.Errorf("remove redriven messages from the dead-letter queue: %w", err)
		}
	}
	return res, nil
}
