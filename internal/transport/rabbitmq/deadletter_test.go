package rabbitmq_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

// putDeadLetter publishes body straight into the dead-letter queue, as the
// dead-letter exchange would, and waits for the broker's confirm.
func putDeadLetter(t *testing.T, ctx context.Context, ch *amqp.Channel, queue, body string) {
	t.Helper()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Headers:      amqp.Table{rabbitmq.HeaderLastError: "550 mailbox unavailable"},
		Body:         []byte(body),
	})
	require.NoError(t, err)
	ok, err := dc.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "broker nacked the dead letter")
}

func requested(id int64) string {
	return fmt.Sprintf(`{"notification_id":"%d","user_id":"u","channel":"email","to":"a@example.com","subject":"s","body":"b"}`, id)
}

func TestRemoveDeadLetters(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ch := declared(t, cfg)
	require.NoError(t, ch.Confirm(false))
	dlq := cfg.Topology().DeadLetterQueue

	n, err := rabbitmq.DeadLetterCount(ctx, cfg)
	require.NoError(t, err)
	require.Zero(t, n)

	// Two copies for notification 2 (a duplicate dead letter), one each for
	// 1, 3 and 4, and one whose payload names nothing.
	bodies := []string{requested(1), requested(2), requested(3), requested(2), requested(4), `not json`}
	for _, b := range bodies {
		putDeadLetter(t, ctx, ch, dlq, b)
	}
	n, err = rabbitmq.DeadLetterCount(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, len(bodies), n)

	// Nothing asked, nothing removed.
	removed, err := rabbitmq.RemoveDeadLetters(ctx, cfg, nil)
	require.NoError(t, err)
	require.Zero(t, removed)

	// 77 has no dead letter: it is simply not found.
	removed, err = rabbitmq.RemoveDeadLetters(ctx, cfg, []int64{2, 4, 77})
	require.NoError(t, err)
	require.Equal(t, 3, removed)

	// The rest is back in the queue, ready, nothing held by the removal.
	require.Eventually(t, func() bool {
		n, err = rabbitmq.DeadLetterCount(ctx, cfg)
		return err != nil || n == 3
	}, waitFor, 10*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	var rest []string
	for range 3 {
		d, ok, err := ch.Get(dlq, true)
		require.NoError(t, err)
		require.True(t, ok)
		rest = append(rest, string(d.Body))
		require.Equal(t, "550 mailbox unavailable", d.Headers[rabbitmq.HeaderLastError], "kept messages are unchanged")
	}
	slices.Sort(rest)
	want := []string{requested(1), requested(3), `not json`}
	slices.Sort(want)
	require.Equal(t, want, rest)
	require.Zero(t, queueLen(t, ch, dlq))
}

func TestRemoveDeadLettersEndsWithCanceledContext(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ch := declared(t, cfg)
	require.NoError(t, ch.Confirm(false))
	dlq := cfg.Topology().DeadLetterQueue
	putDeadLetter(t, ctx, ch, dlq, requested(1))

	canceled, stop := context.WithCancel(ctx)
	stop()
	_, err := rabbitmq.RemoveDeadLetters(canceled, cfg, []int64{1})
	require.ErrorIs(t, err, context.Canceled)
	n, err := rabbitmq.DeadLetterCount(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 1, n, "nothing removed by a canceled call")
}

func TestDeadLettersWithoutQueue(t *testing.T) {
	t.Parallel()
	// Nothing declared under this prefix: no dead letters, and nothing is
	// created by looking.
	url, prefix := testenv.AMQP(t)
	cfg := rabbitmq.Config{URL: url, Settings: consume.Settings{Prefix: prefix}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n, err := rabbitmq.DeadLetterCount(ctx, cfg)
	require.NoError(t, err)
	require.Zero(t, n)
	removed, err := rabbitmq.RemoveDeadLetters(ctx, cfg, []int64{1})
	require.NoError(t, err)
	require.Zero(t, removed)

	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclarePassive(cfg.Topology().DeadLetterQueue, true, false, false, false, nil)
	require.Error(t, err, "the dead-letter queue must not have been created")

	_, err = rabbitmq.DeadLetterCount(ctx, rabbitmq.Config{})
	require.Error(t, err, "a config without URL")
	_, err = rabbitmq.RemoveDeadLetters(ctx, rabbitmq.Config{}, []int64{1})
	require.Error(t, err, "a config without URL")
}
