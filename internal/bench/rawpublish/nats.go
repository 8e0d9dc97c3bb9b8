package rawpublish

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSOptions shapes the raw JetStream publish ceiling.
type NATSOptions struct {
	// Stream is the scratch stream published to, created with file storage
	// and deleted afterwards, with its messages. Required: give it the
	// bench's own name prefix.
	Stream string
	// Subject is the scratch stream's one subject. Required.
	Subject string
	// N is the number of messages. Required.
	N int
	// Window is the number of messages published and not yet acknowledged
	// at any time. Default 1000.
	Window int
}

// NATS measures bare JetStream publishes per second, asynchronous
// and pipelined (up to o.Window awaiting the stream's acknowledgement),
// each the size of a notification.requested event and with a Nats-Msg-Id,
// as herald's publisher sends them. It counts a message when the stream
// acknowledged it; a refusal fails the measurement.
func NATS(ctx context.Context, url string, o NATSOptions) (float64, error) {
	if o.Window == 0 {
		o.Window = 1000
	}
	if o.Stream == "" || o.Subject == "" || o.N < 1 || o.Window < 1 {
		return 0, errors.New("raw publish: want a stream, a subject, n >= 1 and window >= 1")
	}
	nc, err := nats.Connect(url, nats.Name("herald bench"))
	if err != nil {
		// The client's connect errors never quote the URL.
		return 0, fmt.Errorf("raw publish: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.Window))
	if err != nil {
		return 0, fmt.Errorf("raw publish: %w", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: o.Stream, Subjects: []string{o.Subject}, Storage: jetstream.FileStorage,
	}); err != nil {
		return 0, fmt.Errorf("raw publish: create stream %q: %w", o.Stream, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = js.DeleteStream(dctx, o.Stream)
	}()

	body, err := requestedBody()
	if err != nil {
		return 0, fmt.Errorf("raw publish: %w", err)
	}
	start := time.Now()
	var futures []jetstream.PubAckFuture
	acked := 0
	// awaitOldest waits for the oldest acknowledgement outstanding: the
	// window slides one message at a time.
	awaitOldest := func() error {
		f := futures[0]
		futures = futures[1:]
		select {
		case <-f.Ok():
			acked++
			return nil
		case err := <-f.Err():
			return fmt.Errorf("raw publish: stream refused a message: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := range o.N {
		if len(futures) == o.Window {
			if err := awaitOldest(); err != nil {
				return 0, err
			}
		}
		m := nats.NewMsg(o.Subject)
		m.Header.Set("x-message-id", strconv.Itoa(i+1))
		m.Header.Set("x-type", "notification.requested")
		m.Header.Set("Content-Type", "application/json")
		m.Data = body
		f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(strconv.Itoa(i+1)))
		if err != nil {
			return 0, fmt.Errorf("raw publish: publish: %w", err)
		}
		futures = append(futures, f)
	}
	for len(futures) > 0 {
		if err := awaitOldest(); err != nil {
			return 0, err
		}
	}
	return float64(acked) / time.Since(start).Seconds(), nil
}
