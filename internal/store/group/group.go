// Package group gathers the requests of a group commit: a committer takes
// the first request that arrives and then every request already waiting,
// up to a cap, and commits them together. Nothing waits to fill a group, so
// a request that finds its committer idle goes alone at once, and groups
// grow only as fast as requests arrive while a commit is in flight.
//
// It lives beside the store engines, which share it: SQLite's and
// PostgreSQL's grouped creates.
package group

// Next empties into, then blocks until a request arrives on ch or closing
// is closed, and returns into holding that request and every request
// already waiting on ch, at most max in all. ok is false when closing was
// closed first: the committer stops.
func Next[T any](ch <-chan T, closing <-chan struct{}, max int, into []T) (group []T, ok bool) {
	group = into[:0]
	select {
	case r := <-ch:
		group = append(group, r)
	case <-closing:
		return group, false
	}
	for len(group) < max {
		select {
		case r := <-ch:
			group = append(group, r)
		default:
			return group, true
		}
	}
	return group, true
}
