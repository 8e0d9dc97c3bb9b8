package group

import "context"

// Request is one request of a group commit: its caller's context, its
// input, and where its one answer goes.
type Request[In, Out any] struct {
	Ctx context.Context
	In  In
	res chan Result[Out] // buffered: a committer never blocks on it
}

// Result is a request's answer.
type Result[Out any] struct {
	Out Out
	Err error
}

// Answer answers r; a committer calls it once per request it took.
func (r Request[In, Out]) Answer(out Out, err error) { r.res <- Result[Out]{Out: out, Err: err} }

// NewRequest returns a request of in and the channel its answer comes on.
func NewRequest[In, Out any](ctx context.Context, in In) (Request[In, Out], <-chan Result[Out]) {
	res := make(chan Result[Out], 1)
	return Request[In, Out]{Ctx: ctx, In: in, res: res}, res
}

// Hand gives in to a committer receiving on ch and returns its answer.
// Until a committer takes it, it gives up when ctx ends (ctx.Err()) or
// closing is closed (closed); once taken, it is always answered, even after
// ctx ended, so that the caller learns whether its request committed: for
// a committer that cannot hang (SQLite's, on a local file).
func Hand[In, Out any](ctx context.Context, ch chan<- Request[In, Out], closing <-chan struct{}, closed error, in In) (Out, error) {
	return hand(ctx, ch, closing, closed, in, false)
}

// HandOrLeave is Hand for a committer that can wait on a network peer
// (PostgreSQL's): the caller also leaves when ctx ends while its request
// is in a group, with ctx.Err(), and the request may then commit or not,
// as a single statement whose context ends during its commit.
func HandOrLeave[In, Out any](ctx context.Context, ch chan<- Request[In, Out], closing <-chan struct{}, closed error, in In) (Out, error) {
	return hand(ctx, ch, closing, closed, in, true)
}

func hand[In, Out any](ctx context.Context, ch chan<- Request[In, Out], closing <-chan struct{}, closed error, in In, leave bool) (Out, error) {
	var zero Out
	req, res := NewRequest[In, Out](ctx, in)
	select {
	case ch <- req:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-closing:
		return zero, closed
	}
	if !leave {
		r := <-res
		return r.Out, r.Err
	}
	select {
	case r := <-res:
		return r.Out, r.Err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
