package consume

import (
	"errors"
	"fmt"
	"sync"

	"github.com/heraldhq/herald/internal/notify"
)

// ErrSettled is what a settlement of a delivery already settled returns.
var ErrSettled = errors.New("already settled")

// Once makes a delivery settle at most once, even against a confused
// caller: settlements run one at a time, and once one took, the next is an
// error. A settlement that fails leaves the delivery unsettled, so that the
// caller may still fall back to another (say Release after a failed Retry).
// The zero value is an unsettled delivery.
type Once struct {
	mu      sync.Mutex
	settled bool
	// closed, when not nil, is why the delivery can no longer be settled
	// though no settlement took (see Close).
	closed error
}

// Do runs op unless the delivery is settled or closed: then it returns
// ErrSettled, or the reason given to Close, without running op. op runs
// with the guard held and reports whether the delivery is settled
// afterwards (usually: it succeeded; a transport may count a settlement
// that did its main part as taken despite an error). Do returns op's error.
func (o *Once) Do(op func() (settled bool, err error)) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.closed != nil:
		return o.closed
	case o.settled:
		return ErrSettled
	}
	settled, err := op()
	if settled {
		o.settled = true
	}
	return err
}

// Settle is Do for the common case, a settlement that takes when op
// succeeds, and words every error after what was tried and the message's
// id: "ack message 42: already settled", "retry message 42: <op's error>".
func (o *Once) Settle(what, id string, op func() error) error {
	err := o.Do(func() (bool, error) {
		err := op()
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("%s message %s: %w", what, id, err)
	}
	return nil
}

// Close marks the delivery as past settling without a settlement (its
// handler gave it up, say): every later settlement fails with why. It
// reports whether the delivery was still unsettled. A nil why reads as
// ErrSettled.
func (o *Once) Close(why error) (wasUnsettled bool) {
	if why == nil {
		why = ErrSettled
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	wasUnsettled = !o.settled && o.closed == nil
	o.settled = true
	if o.closed == nil {
		o.closed = why
	}
	return wasUnsettled
}

// Settled reports whether a settlement took (or the delivery was closed).
func (o *Once) Settled() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.settled
}

// Delivered is the part of a notify.Delivery every broker's delivery has
// alike: the message as herald reads it, and the guard that settles it
// once. A transport's delivery embeds it beside what its broker needs to
// settle the message.
type Delivered struct {
	Msg  notify.Message
	Once Once
}

// Message returns the delivered message.
func (d *Delivered) Message() notify.Message { return d.Msg }

// Settle is Once.Settle under the message's id: "ack message 42: already
// settled".
func (d *Delivered) Settle(what string, op func() error) error {
	return d.Once.Settle(what, notify.FormatID(d.Msg.ID), op)
}
