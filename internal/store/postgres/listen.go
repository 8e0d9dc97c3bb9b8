package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// listenerApplicationName names the listener's connection in
// pg_stat_activity, apart from the pool's.
const listenerApplicationName = "herald-listener"

// Reconnection of the listener: capped exponential backoff, and a bound on
// each connection attempt so a database that hangs cannot stall it forever.
const (
	listenMinBackoff     = 100 * time.Millisecond
	listenMaxBackoff     = 5 * time.Second
	listenConnectTimeout = 10 * time.Second
)

// Subscribe returns a channel that receives a value (coalesced: at most one
// pending) whenever outbox rows may have been committed: after each Create
// commits, and after the listener (re)connects, since rows may have been
// committed while nobody listened; so a new subscriber may get one wake-up
// with nothing new. The channel is closed when ctx ends or the Store closes.
//
// All subscribers share one listener: a dedicated connection (outside the
// pool) that runs LISTEN, started by the first subscriber and stopped when
// the last one leaves. LISTEN needs a session of its own: behind a pooler
// in transaction mode the listener connects to Config.DirectURL, and
// without one there is no listener (a LISTEN through the pooler would
// register on a server session that other clients use next, and its
// notifications would never reach this one): subscribers then hear only
// this process's own creates, and the relays and table workers find the
// others' rows by polling.
func (s *Store) Subscribe(ctx context.Context) <-chan struct{} {
	return s.hub.Subscribe(ctx)
}

// startListener starts the listener; the hub calls it, under its lock, when
// the first subscriber arrives.
func (s *Store) startListener() {
	lctx, cancel := context.WithCancel(context.Background())
	s.stopListen = cancel
	s.wg.Add(1)
	go s.listen(lctx)
}

// stopListener stops the listener; the hub calls it, under its lock, when
// the last subscriber leaves.
func (s *Store) stopListener() {
	s.stopListen()
	s.stopListen = nil
}

// announce tells everyone who waits for outbox rows that some were just
// committed: this process's subscribers at once, other processes through
// NOTIFY. The NOTIFY is sent by one goroutine, after the commit and outside
// the create's transaction, so creates never queue on NOTIFY's commit lock;
// announcements that arrive while one is being sent fold into the next. A
// NOTIFY lost to a crash costs the listeners one poll interval, never an
// event: the outbox row is committed.
func (s *Store) announce() {
	s.hub.Wake()
	select {
	case s.notifyc <- struct{}{}:
	default:
	}
}

// notifier sends the NOTIFYs that announce asks for, until Close.
func (s *Store) notifier() {
	defer s.wg.Done()
	for {
		select {
		case <-s.life.Done():
			return
		case <-s.notifyc:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// An error is nobody's to handle: the listeners poll as well.
		_, _ = s.pool.Exec(ctx, notifyOutbox)
		cancel()
	}
}

// listen runs the listener until ctx ends, reconnecting after every loss of
// its connection. Its errors go nowhere: subscribers only see wake-ups, and
// the relay's polling covers an outage.
func (s *Store) listen(ctx context.Context) {
	defer s.wg.Done()
	backoff := listenMinBackoff
	for {
		conn, err := s.connectListener(ctx)
		if errors.Is(err, errNoSession) {
			return
		}
		if err == nil {
			backoff = listenMinBackoff
			s.hub.Wake()
			for err == nil {
				_, err = conn.WaitForNotification(ctx)
				if err == nil {
					s.hub.Wake()
				}
			}
			closeListener(conn)
		}
		if ctx.Err() != nil {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenMaxBackoff)
	}
}

// errNoSession is connectListener's answer behind a pooler with no
// direct URL: there is no session to listen on.
var errNoSession = errors.New("behind a pooler with no direct url: no session to listen on")

func (s *Store) connectListener(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
	defer cancel()
	if s.directConfig == nil {
		pooled, err := s.detectPooler(cctx)
		if err != nil {
			return nil, err
		}
		if pooled {
			return nil, errNoSession
		}
	}
	conn, err := pgx.ConnectConfig(cctx, s.listenConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, "LISTEN "+outboxChannel); err != nil {
		closeListener(conn)
		return nil, err
	}
	return conn, nil
}

func closeListener(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx) // the connection may already be gone
}
