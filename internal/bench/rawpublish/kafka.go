package rawpublish

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaOptions shapes the raw Kafka publish ceiling.
type KafkaOptions struct {
	// Topic is the scratch topic produced to; it is created (one
	// partition per broker, replicated like herald's topics: up to 3) and
	// deleted afterwards. Required: give it the bench's own name prefix.
	Topic string
	// N is the number of records. Required.
	N int
	// Window is the number of records produced and not yet acknowledged
	// at any time. Default 1000.
	Window int
}

// Kafka measures bare produces per second with acks from all
// in-sync replicas and the idempotent producer (as herald's relay
// produces), pipelined: up to o.Window records in flight, each the size of
// a notification.requested event and keyed like one. conn reaches the
// cluster (seeds, TLS, SASL). A failed record fails the measurement.
func Kafka(ctx context.Context, conn []kgo.Opt, o KafkaOptions) (float64, error) {
	if o.Window == 0 {
		o.Window = 1000
	}
	if o.Topic == "" || o.N < 1 || o.Window < 1 {
		return 0, fmt.Errorf("raw kafka publish: want a topic, n >= 1 and window >= 1")
	}
	opts := append(append([]kgo.Opt(nil), conn...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(o.Window),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("raw kafka publish: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("raw kafka publish: reach the cluster: %w", err)
	}
	brokers := max(1, len(meta.Brokers))
	resp, err := adm.CreateTopic(ctx, int32(brokers), int16(min(3, brokers)), nil, o.Topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return 0, fmt.Errorf("raw kafka publish: create topic %q: %w", o.Topic, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_, _ = adm.DeleteTopics(dctx, o.Topic)
	}()

	body, err := requestedBody()
	if err != nil {
		return 0, fmt.Errorf("raw kafka publish: %w", err)
	}
	errc := make(chan error, o.N)
	start := time.Now()
	for i := range o.N {
		id := strconv.Itoa(i + 1)
		r := &kgo.Record{Topic: o.Topic, Key: []byte("user-" + strconv.Itoa(i%1000)), Value: body,
			Headers: []kgo.RecordHeader{
				{Key: "message_id", Value: []byte(id)},
				{Key: "content_type", Value: []byte("application/json")},
				{Key: "type", Value: []byte("notification.requested")},
			}}
		// Produce blocks while Window records are unacknowledged.
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) { errc <- err })
	}
	var errs []error
	for range o.N {
		select {
		case err := <-errc:
			if err != nil && len(errs) < 3 {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("raw kafka publish: %w", errors.Join(errs...))
	}
	return float64(o.N) / time.Since(start).Seconds(), nil
}
