package rabbitmq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/notify"
)

// Depth reports the depth of the queues herald declares (the send queue,
// the retry queues, the park queues and the dead-letter queue), for the
// console and GET /status. It holds no connection: each call opens one,
// as Pinger does.
type Depth struct {
	// Config names the broker and the topology (its URL, prefix and retry
	// delays). Required.
	Config Config
}

// QueueDepths asks the broker for each queue's ready messages and
// consumers, with a passive declare (which creates nothing and changes
// nothing). A queue not declared yet is left out. RabbitMQ's AMQP answer
// has no count of unacknowledged messages: InFlight is nil.
func (d Depth) QueueDepths(ctx context.Context) ([]notify.QueueDepth, error) {
	cfg := d.Config
	cfg.ConnectionName = "herald status"
	cfg, conn, stop, err := openConn(ctx, cfg, "status")
	if err != nil {
		return nil, fmt.Errorf("queue depths: %w", err)
	}
	defer stop()
	t := cfg.Topology()
	type q struct{ name, role string }
	qs := []q{{t.SendQueue, notify.QueueSend}}
	if t.HighQueue != "" {
		qs = append(qs, q{t.HighQueue, notify.QueueSend})
	}
	for _, r := range t.RetryQueues() {
		qs = append(qs, q{r.Name, notify.QueueRetry})
	}
	for _, p := range t.ParkQueues() {
		qs = append(qs, q{p.Name, notify.QueuePark})
	}
	qs = append(qs, q{t.DeadLetterQueue, notify.QueueDead})

	var (
		out []notify.QueueDepth
		ch  *amqp.Channel
	)
	defer func() {
		if ch != nil {
			_ = ch.Close()
		}
	}()
	for _, x := range qs {
		if ch == nil {
			if ch, err = conn.Channel(); err != nil {
				return nil, fmt.Errorf("queue depths: open channel: %w", dlqCtxErr(ctx, err))
			}
		}
		st, err := ch.QueueDeclarePassive(x.name, true, false, false, false, nil)
		if dlqNotFound(err) {
			// The broker closed the channel: the next queue gets a new one.
			ch = nil
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("queue depths: %s: %w", x.name, dlqCtxErr(ctx, err))
		}
		consumers := st.Consumers
		out = append(out, notify.QueueDepth{Name: x.name, Role: x.role, Ready: int64(st.Messages), Consumers: &consumers})
	}
	return out, nil
}
