package notify

import (
	"context"
	"errors"
	"fmt"
)

// Why a redrive did not redrive a notification it named or selected.
const (
	// SkipNotFound: there is no such notification.
	SkipNotFound = "not_found"
	// SkipNotFailed: the notification is pending or sent (or was sent or
	// redriven between the selection and its turn); it is never sent twice.
	SkipNotFailed = "not_failed"
	// SkipFilteredOut: the notification is failed, but the selection's
	// since, error or limit left it out.
	SkipFilteredOut = "filtered_out"
)

// Skip is a notification a redrive did not redrive, and why.
type Skip struct {
	ID     int64
	Reason string
}

// ExplainSkips says why each notification that a redrive named in ids, or
// selected, was not redriven: the ids in the order given (once each), then
// those selected but no longer failed at their turn. get reads a
// notification (the store's Get), to tell an unknown id from one that is
// not failed. Shared by the API and `herald dlq redrive`.
func ExplainSkips(ctx context.Context, get func(context.Context, int64) (Notification, error), ids []int64, res RedriveResult) ([]Skip, error) {
	done := map[int64]bool{}
	for _, id := range res.Redriven {
		done[id] = true
	}
	skipped := map[int64]bool{}
	for _, id := range res.Skipped {
		skipped[id] = true
	}
	var out []Skip
	for _, id := range ids {
		if done[id] {
			continue
		}
		done[id] = true
		if skipped[id] {
			out = append(out, Skip{id, SkipNotFailed})
			continue
		}
		n, err := get(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			out = append(out, Skip{id, SkipNotFound})
		case err != nil:
			return nil, fmt.Errorf("explain skipped notification %d: %w", id, err)
		case n.Status != StatusFailed:
			out = append(out, Skip{id, SkipNotFailed})
		default:
			out = append(out, Skip{id, SkipFilteredOut})
		}
	}
	for _, id := range res.Skipped {
		if !done[id] {
			done[id] = true
			out = append(out, Skip{id, SkipNotFailed})
		}
	}
	return out, nil
}
