package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/transport/consume"
)

// deadLetterRole names the connection of the dead-letter operations
// ("herald dead letters" unless Config.ConnectionName says otherwise).
const deadLetterRole = "dead letters"

// DeadLetterCount returns the number of messages ready in the dead-letter
// queue (declared passively: nothing is created). A queue that was never
// declared holds no dead letters: 0.
func DeadLetterCount(ctx context.Context, cfg Config) (int, error) {
	_, q, stop, err := openDeadLetters(ctx, cfg)
	if errors.Is(err, errNoDeadLetterQueue) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	stop()
	return q.Messages, nil
}

// RemoveDeadLetters deletes from the dead-letter queue every message whose
// payload names one of notificationIDs (all copies), and returns how many it
// deleted. It is what a redrive does once the notifications have fresh
// events: the dead messages would otherwise stay in the queue as if still
// unresolved.
//
// It takes the messages one by one (basic.get, manual acknowledgement), at
// most as many as the queue held when it began, so it ends even while new
// dead letters arrive. The ones to delete are acknowledged at once; the others
// are held and handed back (nack with requeue) only at the end, because a
// message requeued at once would be the next one got again. Should it fail or
// ctx end half-way, closing the connection hands the held messages back: a
// message is only ever deleted when it was asked for. A message whose payload
// cannot be read names no notification and stays.
func RemoveDeadLetters(ctx context.Context, cfg Config, notificationIDs []int64) (removed int, err error) {
	if len(notificationIDs) == 0 {
		// Nothing to remove; a configuration that cannot work still fails.
		return 0, cfg.withDefaults().validate()
	}
	named := consume.NamesOneOf(notificationIDs)
	ch, q, stop, err := openDeadLetters(ctx, cfg)
	if errors.Is(err, errNoDeadLetterQueue) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("remove dead letters: %w", err)
	}
	defer stop()
	queue := cfg.Topology().DeadLetterQueue

	var (
		kept    amqp.Delivery
		anyKept bool
	)
	for range q.Messages {
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("remove dead letters: %w", err)
		}
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return removed, fmt.Errorf("remove dead letters: get from %q: %w", queue, dlqCtxErr(ctx, err))
		}
		if !ok {
			break // drained by someone else meanwhile
		}
		if named(d.Body) {
			if err := d.Ack(false); err != nil {
				return removed, fmt.Errorf("remove dead letters: ack: %w", dlqCtxErr(ctx, err))
			}
			removed++
			continue
		}
		kept, anyKept = d, true
	}
	if anyKept {
		// One nack for every unsettled delivery up to the last one kept:
		// the deleted ones are settled already.
		if err := kept.Nack(true, true); err != nil {
			return removed, fmt.Errorf("remove dead letters: requeue the others: %w", dlqCtxErr(ctx, err))
		}
	}
	// Acks are not confirmed by the broker; the close handshake comes after
	// them on the channel, so once it is answered they have been applied.
	if err := ch.Close(); err != nil {
		return removed, fmt.Errorf("remove dead letters: close channel: %w", dlqCtxErr(ctx, err))
	}
	return removed, nil
}

// errNoDeadLetterQueue says the dead-letter queue was never declared: it
// holds no dead letters.
var errNoDeadLetterQueue = errors.New("no dead-letter queue")

// openDeadLetters connects for one dead-letter operation (see openConn)
// and declares the dead-letter queue passively (nothing is created) on a
// channel of its own; a queue that was never declared is
// errNoDeadLetterQueue. The returned stop closes the connection; on an
// error it is closed already.
func openDeadLetters(ctx context.Context, cfg Config) (*amqp.Channel, amqp.Queue, func(), error) {
	cfg, conn, stop, err := openConn(ctx, cfg, deadLetterRole)
	if err != nil {
		return nil, amqp.Queue{}, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		stop()
		return nil, amqp.Queue{}, nil, fmt.Errorf("open channel: %w", dlqCtxErr(ctx, err))
	}
	q, err := ch.QueueDeclarePassive(cfg.Topology().DeadLetterQueue, true, false, false, false, nil)
	if err != nil {
		stop()
		if dlqNotFound(err) {
			return nil, amqp.Queue{}, nil, errNoDeadLetterQueue
		}
		return nil, amqp.Queue{}, nil, dlqCtxErr(ctx, err)
	}
	return ch, q, stop, nil
}

func dlqNotFound(err error) bool {
	var aerr *amqp.Error
	return errors.As(err, &aerr) && aerr.Code == amqp.NotFound
}

// dlqCtxErr prefers ctx's error: when ctx ended, the connection was closed on
// purpose and the library's "channel/connection is not open" hides why.
func dlqCtxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}
