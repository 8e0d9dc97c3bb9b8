// Package batch holds the rules every store engine applies to the items of
// a batch the same way, whatever it writes them with: which claims of a
// group go ahead, and how one create's outcome goes into a batch's
// results.
//
// It lives beside the store engines, which share it.
package batch

import (
	"errors"

	"github.com/heraldhq/herald/internal/notify"
)

// FirstClaims answers every request of reqs notify.ClaimBusy in out (as
// long as reqs) and returns the indexes, in order, of the requests the
// group claims: the first of each message and of each notification. A
// later request for a message or notification already in the group stays
// busy, since the group itself holds it.
func FirstClaims(reqs []notify.ClaimRequest, out []notify.Claim) []int {
	var firsts []int
	seenM := make(map[int64]bool, len(reqs))
	seenN := make(map[int64]bool, len(reqs))
	for i, r := range reqs {
		out[i] = notify.Claim{MessageID: r.MessageID, NotificationID: r.NotificationID, Status: notify.ClaimBusy, RetryCount: r.RetryCount}
		if seenM[r.MessageID] || seenN[r.NotificationID] {
			continue
		}
		seenM[r.MessageID], seenN[r.NotificationID] = true, true
		firsts = append(firsts, i)
	}
	return firsts
}

// PutCreated puts the outcome of one create of a batch, c or err, into r:
// notify.ErrConflict is that create's own answer, and any other error is
// returned, since it fails the whole batch. written reports that the
// create wrote a notification (it was not a replay).
func PutCreated(r *notify.BatchResult, c notify.Created, err error) (written bool, _ error) {
	switch {
	case errors.Is(err, notify.ErrConflict):
		r.Err = notify.ErrConflict
		return false, nil
	case err != nil:
		return false, err
	}
	r.Created = c
	return !c.Replayed, nil
}
