package mongo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/batch"
)

// A claim and a record are each one change of the notification document
// (see change): the claim, the attempt it starts and the message's lease are
// written together, and so are a record's status, attempt and message.

// ClaimAndRecord records results, then answers claims. Each is its own
// change of one document: there is no transaction around the group, and
// none is needed, since no guarantee spans two notifications. It
// implements worker.Bookkeeper.
func (s *Store) ClaimAndRecord(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration, results []notify.DeliveryResult) ([]notify.Claim, []bool, error) {
	if err := notify.CheckBookkeeping(reqs, lease, results); err != nil {
		return nil, nil, err
	}
	claims := make([]notify.Claim, len(reqs))
	recorded := make([]bool, len(results))
	for i, r := range results {
		ok, err := s.record(ctx, r)
		if err != nil {
			return nil, nil, fmt.Errorf("record deliveries: %w", err)
		}
		recorded[i] = ok
	}
	for _, i := range batch.FirstClaims(reqs, claims) {
		c, err := s.claimOne(ctx, reqs[i], lease)
		if err != nil {
			return nil, nil, fmt.Errorf("claim deliveries: %w", err)
		}
		claims[i] = c
	}
	return claims, recorded, nil
}

func (s *Store) claimOne(ctx context.Context, r notify.ClaimRequest, lease time.Duration) (notify.Claim, error) {
	var c notify.Claim
	found, _, err := s.change(ctx, r.NotificationID, func(d *doc) error {
		c = notify.Claim{MessageID: r.MessageID, NotificationID: r.NotificationID, RetryCount: r.RetryCount}
		t := now()
		p := d.processed(r.MessageID)
		switch {
		case (p != nil && p.ProcessedAt != nil) || d.Status != string(notify.StatusPending):
			c.Status = notify.ClaimDuplicate
			if !d.markProcessed(r.MessageID, t) {
				return errNoChange
			}
			return nil
		case p != nil && r.RetryCount < p.NextRetryCount:
			// A stale copy: its delivery's retry was recorded, and the
			// retry's copy carries the delivery on. Nothing changes, so
			// that the message id stays open for that copy.
			c.Status = notify.ClaimDuplicate
			return errNoChange
		case d.Claim != nil && d.Claim.Until.After(t):
			c.Status = notify.ClaimBusy
			return errNoChange
		case d.ExpiresAt != nil && !d.ExpiresAt.After(t):
			// Past its expires_at: no send starts. It ends expired, with
			// its status event in the same write, and the message is
			// answered (and recorded) as a duplicate: nothing sent.
			c.Status = notify.ClaimDuplicate
			d.Status, d.ExpiredAt, d.UpdatedAt, d.Claim, d.RetryDueAt = string(notify.StatusExpired), &t, t, nil, nil
			d.markProcessed(r.MessageID, t)
			if s.statusEvents {
				return d.addStatusEvent(t)
			}
			return nil
		}
		c.Status = notify.ClaimTaken
		if d.NextAttempt+1 >= attemptSpan {
			return fmt.Errorf("notification %d has had %d attempts, the most one can have", d.ID, attemptSpan-1)
		}
		attempt := 1
		for _, a := range d.History {
			attempt = max(attempt, a.Attempt+1)
		}
		d.NextAttempt++
		c.AttemptID = d.ID*attemptSpan + d.NextAttempt
		c.Attempt = attempt
		c.Until = t.Add(lease).Truncate(time.Millisecond)
		d.History = append(d.History, attDoc{ID: c.AttemptID, Attempt: attempt, MessageID: r.MessageID, StartedAt: t})
		if stale := d.Claim; stale != nil {
			// The expired claim's holder is presumed dead: its lease on
			// another message goes, and its late record will fail.
			d.dropLease(func(p procDoc) bool { return p.AttemptID == stale.AttemptID && p.MessageID != r.MessageID })
		}
		d.Claim = &claimDoc{AttemptID: c.AttemptID, MessageID: r.MessageID, Until: c.Until}
		if p := d.processed(r.MessageID); p != nil {
			p.LeaseUntil, p.AttemptID = &c.Until, c.AttemptID
		} else {
			d.Processed = append(d.Processed, procDoc{MessageID: r.MessageID, LeaseUntil: &c.Until, AttemptID: c.AttemptID})
		}
		return nil
	})
	if err != nil {
		return notify.Claim{}, fmt.Errorf("claim message %d of notification %d: %w", r.MessageID, r.NotificationID, err)
	}
	if !found {
		c = notify.Claim{MessageID: r.MessageID, NotificationID: r.NotificationID, Status: notify.ClaimMissing, RetryCount: r.RetryCount}
		if err := s.recordOrphan(ctx, r.MessageID); err != nil {
			return notify.Claim{}, err
		}
	}
	return c, nil
}

// recordOrphan records a message id whose notification does not exist as
// processed, in orphan_messages (its _id is the message id).
func (s *Store) recordOrphan(ctx context.Context, msg int64) error {
	_, err := s.orph.InsertOne(ctx, bson.D{{Key: "_id", Value: key(msg)}, {Key: "message_id", Value: msg}, {Key: "processed_at", Value: now()}})
	if err != nil && !mgo.IsDuplicateKeyError(err) {
		return fmt.Errorf("record message %d: %w", msg, classify(err))
	}
	return nil
}

// record applies one result: the compare-and-set is on the claim's attempt
// id, which the document holds only while that claim is live.
func (s *Store) record(ctx context.Context, r notify.DeliveryResult) (bool, error) {
	c := r.Claim
	applied := false
	_, _, err := s.change(ctx, c.NotificationID, func(d *doc) error {
		applied = false
		t := now()
		finished := false
		for i := range d.History {
			a := &d.History[i]
			if a.ID == c.AttemptID && a.FinishedAt == nil {
				a.FinishedAt, a.Outcome, a.Error = &t, r.Outcome, r.Error
				if r.Outcome == notify.AttemptDeferred {
					a.Deferral = r.Deferral
				}
				finished = true
			}
		}
		if d.Status != string(notify.StatusPending) || d.Claim == nil || d.Claim.AttemptID != c.AttemptID {
			if !finished {
				return errNoChange
			}
			return nil
		}
		applied = true
		if r.Outcome == notify.AttemptDeferred {
			d.foldDeferral(c.AttemptID)
		}
		switch r.Outcome {
		case notify.AttemptSent:
			d.Status, d.SentAt = string(notify.StatusSent), &t
		case notify.AttemptDead:
			d.Status, d.FailedAt = string(notify.StatusFailed), &t
			// Its fallback hop is made after this write (makeHops), and
			// by the reconciler's pass if this process stops first.
			d.FallbackDue = d.Fallback != "" && d.FallbackNext == 0
		}
		if r.Outcome != notify.AttemptDeferred {
			d.Attempts++
		}
		if r.Outcome == notify.AttemptRetry || r.Outcome == notify.AttemptDead {
			d.LastError = r.Error
		}
		d.UpdatedAt = t
		d.RetryDueAt = nil
		if r.Outcome == notify.AttemptRetry {
			due := now().Add(r.RetryIn)
			d.RetryDueAt = &due
		}
		d.Claim = nil
		held := func(p procDoc) bool { return p.MessageID == c.MessageID && p.AttemptID == c.AttemptID }
		if r.Outcome == notify.AttemptSent || r.Outcome == notify.AttemptDead {
			d.markProcessed(c.MessageID, t)
			// The status event goes in the same document write as the
			// settling: atomic without a transaction.
			if s.statusEvents {
				if err := d.addStatusEvent(t); err != nil {
					return err
				}
			}
		} else {
			if r.Outcome == notify.AttemptRetry {
				// The stale-copy guard: copies with the claim's retry
				// count or less are spent (the retry's copy has one more).
				for i := range d.Processed {
					if p := &d.Processed[i]; p.ProcessedAt == nil && held(*p) {
						p.NextRetryCount = max(p.NextRetryCount, c.RetryCount+1)
					}
				}
			}
			d.dropLease(held)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("record attempt %d of notification %d: %w", c.AttemptID, c.NotificationID, err)
	}
	if applied && r.Outcome == notify.AttemptDead {
		// On failure the dead letter stays recorded with fallback_due,
		// and the reconciler's next pass makes the hop: the result was
		// recorded either way.
		_ = s.makeHops(ctx, c.NotificationID)
	}
	if s.statusEvents && applied && (r.Outcome == notify.AttemptSent || r.Outcome == notify.AttemptDead) {
		s.hub.Wake() // a status event was written
	}
	return applied, nil
}

// foldDeferral folds the just finished deferral aid into the attempt
// before it when that one is a deferral of the same kind: one more repeat
// there, with the latest error and time, and aid's own entry goes (one
// entry per outage, not one per probe).
func (d *doc) foldDeferral(aid int64) {
	i := slices.IndexFunc(d.History, func(a attDoc) bool { return a.ID == aid })
	if i < 1 {
		return
	}
	cur, prev := d.History[i], &d.History[i-1]
	if cur.Deferral == "" || prev.Outcome != notify.AttemptDeferred || prev.Deferral != cur.Deferral {
		return
	}
	prev.Repeats++
	prev.LastAt = cur.FinishedAt
	if cur.Error != "" {
		prev.Error = cur.Error
	}
	d.History = slices.Delete(d.History, i, i+1)
}
