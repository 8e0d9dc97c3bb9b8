package rawpublish_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/bench/rawpublish"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

func TestRabbitMQ(t *testing.T) {
	t.Parallel()
	amqpURL, prefix := testenv.AMQP(t)
	queue := prefix + "raw"
	rate, err := rawpublish.RabbitMQ(t.Context(), amqpURL, rawpublish.RabbitMQOptions{Queue: queue, N: 500, Window: 64})
	require.NoError(t, err)
	require.Greater(t, rate, 0.0)

	// The scratch queue is deleted afterwards.
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var aerr *amqp.Error
	require.ErrorAs(t, err, &aerr)
	require.Equal(t, amqp.NotFound, aerr.Code)
}
