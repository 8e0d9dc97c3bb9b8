package mongo

import (
	"context"
	"errors"
	"fmt"
	"slices"

	mgo "go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/batch"
)

// CreateBatch writes the creates of nns in their order, each as Create
// writes it: one document holding the notification and its event, so each
// is all or nothing. A run of requests without an idempotency key is one
// ordered insert of many documents (one round trip); a request with a key
// runs create (replay or conflict, within the batch too: a key given twice
// answers the first create again, or notify.ErrConflict).
//
// The batch as a whole is not atomic: MongoDB under FerretDB refuses
// transactions. A failure part way fails the call, and the creates before
// it stay written (each with its event, so each is delivered); a client
// that gives every item an idempotency key can send the batch again and
// gets the written ones replayed. A debug fault on any request is found
// before anything is written, so it writes nothing; so is a recipient
// whose revision is no longer the one a request read
// (notify.ErrRecipientChanged): every revision is checked first, the way
// create checks one (a read, not a lock), so that the API can resolve the
// batch again without a create written twice.
func (s *Store) CreateBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	checked := map[string]int64{}
	for _, nn := range nns {
		if nn.Fault == notify.FaultAfterOutboxInsert {
			return nil, fmt.Errorf("create batch: %w", notify.ErrInjectedFault)
		}
		if rev := nn.RecipientRevision; rev != 0 && checked[nn.Request.UserID] != rev {
			if err := s.checkRevision(ctx, nn.Request.UserID, rev); err != nil {
				return nil, fmt.Errorf("create batch: %w", err)
			}
			checked[nn.Request.UserID] = rev
		}
	}
	nns = slices.Clone(nns)
	for i := range nns {
		nns[i].RecipientRevision = 0 // checked above
	}
	out := make([]notify.BatchResult, len(nns))
	written := false
	defer func() {
		if written {
			s.hub.Wake()
		}
	}()
	for i := 0; i < len(nns); {
		if nns[i].IdempotencyKey == "" {
			j := i + 1
			for j < len(nns) && nns[j].IdempotencyKey == "" {
				j++
			}
			done, err := s.insertRun(ctx, nns[i:j], out[i:j])
			written = written || done > 0
			if err != nil {
				return nil, fmt.Errorf("create batch: request %d of %d (the requests before it are done): %w", i+done+1, len(nns), err)
			}
			i = j
			continue
		}
		c, err := s.create(ctx, nns[i])
		w, err := batch.PutCreated(&out[i], c, err)
		if err != nil {
			return nil, fmt.Errorf("create batch: request %d of %d (the requests before it are done): %w", i+1, len(nns), err)
		}
		written = written || w
		i++
	}
	return out, nil
}

// insertRun writes creates without a key in one ordered insert and fills
// out; an id another process took meanwhile stops the insert there, and the
// rest go one by one (create moves past taken ids). It returns how many
// are written.
func (s *Store) insertRun(ctx context.Context, nns []notify.NewNotification, out []notify.BatchResult) (int, error) {
	docs := make([]any, len(nns))
	for k, nn := range nns {
		id, err := s.allocID(ctx)
		if err != nil {
			return 0, err
		}
		suppressed, err := s.optedOut(ctx, nn)
		if err != nil {
			return 0, err
		}
		d, n, err := newDoc(nn, id, now(), suppressed, s.statusEvents)
		if err != nil {
			return 0, err
		}
		docs[k] = d
		out[k].Created = notify.Created{Notification: n}
	}
	_, err := s.n.InsertMany(ctx, docs)
	if err == nil {
		return len(nns), nil
	}
	var bwe mgo.BulkWriteException
	if !errors.As(err, &bwe) || len(bwe.WriteErrors) == 0 || !mgo.IsDuplicateKeyError(err) {
		return 0, fmt.Errorf("insert notifications: %w", classify(err))
	}
	// Ordered: the documents before the first refused one are written.
	done := bwe.WriteErrors[0].Index
	s.nextID.Store(0) // read the largest id again
	for k := done; k < len(nns); k++ {
		c, err := s.create(ctx, nns[k])
		if err != nil {
			return k, err
		}
		out[k].Created = c
	}
	return len(nns), nil
}
