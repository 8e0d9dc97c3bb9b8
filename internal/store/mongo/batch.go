package mongo

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
)

// CreateBatch writes the creates of nns one after the other, each as
// Create writes it: one insert of the notification with its event inside,
// so each is all or nothing, and a known idempotency key replays or
// conflicts (within the batch too: a key given twice answers the first
// create again, or notify.ErrConflict).
//
// The batch as a whole is not atomic: MongoDB under FerretDB refuses
// transactions. A failure part way fails the call, and the creates before
// it stay written (each with its event, so each is delivered); a client
// that gives every item an idempotency key can send the batch again and
// gets the written ones replayed. A debug fault on any request is found
// before anything is written, so it writes nothing. See api.Store.
func (s *Store) CreateBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	for _, nn := range nns {
		if nn.Fault == notify.FaultAfterOutboxInsert {
			return nil, fmt.Errorf("create batch: %w", notify.ErrInjectedFault)
		}
	}
	out := make([]notify.BatchResult, len(nns))
	written := false
	for i, nn := range nns {
		c, err := s.create(ctx, nn)
		switch {
		case errors.Is(err, notify.ErrConflict):
			out[i].Err = notify.ErrConflict
		case err != nil:
			if written {
				s.hub.Wake()
			}
			return nil, fmt.Errorf("create batch: request %d of %d (the %d before it are written): %w", i+1, len(nns), i, err)
		default:
			out[i].Created = c
			written = written || !c.Replayed
		}
	}
	if written {
		s.hub.Wake()
	}
	return out, nil
}
