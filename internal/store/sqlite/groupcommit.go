package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/group"
)

// Group commit. With synchronous=FULL every commit waits for an fsync of the
// write-ahead log, and SQLite has one writer: creates one transaction each
// would run at the disk's fsync rate. Instead, one goroutine takes every
// create that queued while the previous group committed and runs them in
// one transaction, each inside a savepoint of its own: a create that fails
// (an idempotency conflict, the debug fault) rolls back to its savepoint and
// leaves the others alone, and the group's one commit makes every other
// create durable at once. A caller is answered only after that commit, so a
// 201 still means "committed and synced".

// maxCreateGroup caps a group, so that one commit never holds the write
// connection for long.
const maxCreateGroup = 256

// groupTimeout bounds one group's transaction.
const groupTimeout = 30 * time.Second

// errClosed answers a create made after Close.
var errClosed = errors.New("sqlite store is closed")

type (
	createReq = group.Request[notify.NewNotification, notify.Created]
	createRes = group.Result[notify.Created]
)

// groupCreate hands nn to the committer and waits for its answer (see
// group.Hand).
func (s *Store) groupCreate(ctx context.Context, nn notify.NewNotification) (notify.Created, error) {
	return group.Hand(ctx, s.creates, s.closing, errClosed, nn)
}

// commitCreates is the committer: it runs until Close.
func (s *Store) commitCreates() {
	defer s.committer.Done()
	for {
		batch, ok := group.Next(s.creates, s.closing, maxCreateGroup, nil)
		if !ok {
			return
		}
		s.commitGroup(batch)
	}
}

// beginDurable begins a write transaction whose commit is synced as
// Config.Synchronous asks (FULL: the log is fsynced at commit, so a 201
// survives a power loss). The other writes (claims, records, relay marks)
// commit with synchronous=NORMAL: a power loss can undo their last commits,
// which only makes a message come back (a redelivery the dedup absorbs, or
// the send->record window of guarantee 3), never loses a create. The pragma
// is set on the one write connection, held from before BEGIN to after the
// commit, and set back when it is released.
func (s *Store) beginDurable(ctx context.Context) (*sql.Tx, func(), error) {
	conn, err := s.write.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA synchronous = "+s.synchronous); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		_, _ = conn.ExecContext(ctx, "PRAGMA synchronous = NORMAL")
		_ = conn.Close()
		return nil, nil, err
	}
	return tx, func() {
		_, _ = conn.ExecContext(context.Background(), "PRAGMA synchronous = NORMAL")
		_ = conn.Close()
	}, nil
}

// commitGroup runs group in one transaction and answers every request.
func (s *Store) commitGroup(group []createReq) {
	res := make([]createRes, len(group))
	answer := func() {
		woke := false
		for i, r := range group {
			r.Answer(res[i].Out, res[i].Err)
			if res[i].Err == nil && !res[i].Out.Replayed && !woke {
				s.hub.Wake()
				woke = true
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	tx, release, err := s.beginDurable(ctx)
	if err != nil {
		for i := range res {
			res[i].Err = fmt.Errorf("begin: %w", classify(err))
		}
		answer()
		return
	}
	defer release()
	t := now()
	ran := 0
	for i, r := range group {
		if err := r.Ctx.Err(); err != nil {
			res[i].Err = err // the caller gave up before its turn: nothing written
			continue
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT create_one"); err != nil {
			res[i].Err = fmt.Errorf("savepoint: %w", classify(err))
			continue
		}
		c, err := s.createIn(ctx, tx, r.In, t)
		if err != nil {
			if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO create_one"); rerr != nil {
				// The transaction cannot be trusted any more: fail the group.
				_ = tx.Rollback()
				for k := range res {
					if res[k].Err == nil {
						res[k] = createRes{Err: fmt.Errorf("roll back to savepoint: %w", classify(rerr))}
					}
				}
				res[i].Err = err
				answer()
				return
			}
			res[i].Err = err
		} else {
			res[i].Out = c
			ran++
		}
		if _, err := tx.ExecContext(ctx, "RELEASE create_one"); err != nil {
			_ = tx.Rollback()
			for k := range res {
				if res[k].Err == nil {
					res[k] = createRes{Err: fmt.Errorf("release savepoint: %w", classify(err))}
				}
			}
			answer()
			return
		}
	}
	if ran == 0 {
		_ = tx.Rollback()
		answer()
		return
	}
	if err := tx.Commit(); err != nil {
		for k := range res {
			if res[k].Err == nil {
				res[k] = createRes{Err: fmt.Errorf("commit: %w", classify(err))}
			}
		}
	}
	answer()
}
