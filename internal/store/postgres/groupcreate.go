package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/group"
)

// Grouped creates. A create without an idempotency key is one statement
// and one commit (insertCreates), and each commit costs the database a WAL
// flush, a transaction's start and end and the statement's round trip,
// more than the two rows it writes. So creates queue for a few committers:
// each takes every create that queued while it ran the previous group (up
// to maxCreateGroup: package group) and writes them in one statement, one
// commit for the group: under load the cost of a commit is shared, and at
// rest a create costs what it did alone. A caller is
// answered only after the group's commit, so a 201 still means committed.
//
// A group fails or succeeds whole (one statement is one transaction). When
// the server refused the statement (an error it answered: nothing
// committed), each create of the group is retried alone, so that one bad
// request fails alone; when the outcome is unknown (the connection broke
// before the answer) nobody is retried, since a create without a key
// cannot be repeated safely, and every caller learns that its create may
// or may not have committed, as a single create would.

const (
	// createCommitters run groups at once: one group's commit overlaps the
	// next group's statement.
	createCommitters = 2
	// maxCreateGroup caps a group, so that one statement stays short.
	maxCreateGroup = 128
	// createGroupTimeout bounds one group's statement and commit (the
	// session's statement_timeout bounds it too).
	createGroupTimeout = 30 * time.Second
)

// errStoreClosed answers a create made after Close.
var errStoreClosed = errors.New("postgres store is closed")

type createReq = group.Request[notify.NewNotification, notify.Created]

// startCommitters starts the committers; Close stops them.
func (s *Store) startCommitters() {
	s.creates = make(chan createReq)
	for range createCommitters {
		s.wg.Add(1)
		go s.commitCreates()
	}
}

// groupCreate hands nn to a committer and waits for its answer, or for ctx
// to end (group.HandOrLeave): a group can wait on a database that stopped
// answering, and its callers must not wait longer than they asked to.
func (s *Store) groupCreate(ctx context.Context, nn notify.NewNotification) (notify.Created, error) {
	return group.HandOrLeave(ctx, s.creates, s.life.Done(), errStoreClosed, nn)
}

// commitCreates is a committer: it runs until Close.
func (s *Store) commitCreates() {
	defer s.wg.Done()
	batch := make([]createReq, 0, maxCreateGroup)
	for {
		var ok bool
		if batch, ok = group.Next(s.creates, s.life.Done(), maxCreateGroup, batch); !ok {
			return
		}
		s.runGroup(batch)
	}
}

// runGroup writes the group's live creates and answers every one.
func (s *Store) runGroup(group []createReq) {
	live := group[:0:0]
	for _, req := range group {
		if err := req.Ctx.Err(); err != nil {
			req.Answer(notify.Created{}, err) // its caller is gone: not written
			continue
		}
		live = append(live, req)
	}
	if len(live) == 0 {
		return
	}
	err := s.writeGroup(live)
	var refused *pgconn.PgError
	switch {
	case err == nil:
	case len(live) > 1 && errors.As(err, &refused):
		// The server refused the group and committed nothing: each
		// create alone, so that only the one at fault fails.
		for _, req := range live {
			if err := s.writeGroup([]createReq{req}); err != nil {
				req.Answer(notify.Created{}, err)
			}
		}
	default:
		for _, req := range live {
			req.Answer(notify.Created{}, err)
		}
	}
}

// writeGroup runs one group's statement and, when it committed, wakes the
// relays and answers every create of the group; when it failed it answers
// none (runGroup does).
func (s *Store) writeGroup(group []createReq) error {
	// The statement runs in the first create's context, without its
	// cancellation (the group is answered whole): a lone create's
	// statement is a span of its own trace.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].Ctx), createGroupTimeout)
	defer cancel()
	// Close ends a group in flight (a hung database would hold Close for
	// the whole timeout otherwise).
	defer context.AfterFunc(s.life, cancel)()
	nns := make([]notify.NewNotification, len(group))
	for i, req := range group {
		nns[i] = req.In
	}
	cs, err := CreateGroup(ctx, s.pool, nns)
	if err != nil {
		return err
	}
	s.announce()
	for i, req := range group {
		req.Answer(cs[i], nil)
	}
	return nil
}
