package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/transport/kafka"
	"github.com/heraldhq/herald/internal/transport/nats"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
	"github.com/heraldhq/herald/internal/transport/sqs"
)

// The broker table of docs/production.md names RabbitMQ's queues as the topology
// declares them: the send, retry and dead-letter queues, and every park
// queue (by name, or by its ".delay" suffix after the first), and no park
// queue the topology does not declare.
func TestBrokerTableRabbitMQ(t *testing.T) {
	var row string
	for _, r := range mdTable(t, "docs/production.md", "## Brokers", "broker") {
		if r[0] == "RabbitMQ" {
			row = r[2]
		}
	}
	require.NotEmpty(t, row, "docs/production.md's broker table has no RabbitMQ row")
	topo := rabbitmq.NewTopology("", 30*time.Second)
	spans := codeSpans(row)
	for _, q := range []string{topo.SendQueue, topo.RetryQueue, topo.DeadLetterQueue} {
		require.Contains(t, spans, q, "docs/production.md, broker table: RabbitMQ's queue %s", q)
	}
	declared := map[string]bool{}
	for _, q := range topo.ParkQueues() {
		suffix := strings.TrimPrefix(q.Name, topo.ParkQueue)
		declared[suffix] = true
		require.True(t, slices.Contains(spans, q.Name) || slices.Contains(spans, suffix), "docs/production.md, broker table: park queue %s", q.Name)
	}
	for _, s := range spans {
		name := strings.TrimPrefix(s, topo.ParkQueue)
		if strings.HasPrefix(s, topo.ParkQueue+".") || (strings.HasPrefix(s, ".") && len(s) > 1 && s[1] >= '0' && s[1] <= '9') {
			require.True(t, declared[name], "docs/production.md, broker table: park queue %s is not declared", s)
		}
	}
}

// The broker table of docs/production.md names the NATS, Kafka and SQS
// names as their transports declare them.
func TestBrokerTableOthers(t *testing.T) {
	rows := map[string][]string{}
	for _, r := range mdTable(t, "docs/production.md", "## Brokers", "broker") {
		require.GreaterOrEqual(t, len(r), 3, "docs/production.md, broker table: a row has fewer than 3 cells: %q", r)
		rows[r[0]] = codeSpans(r[2])
	}
	n := nats.NewTopology("")
	s := sqs.NewTopology("PREFIX", false)
	for broker, names := range map[string][]string{
		"NATS JetStream": {n.Stream, n.Requested, n.Retry, n.DeadLetter, n.WorkerConsumer, n.RetryConsumer, n.StatusStream, n.StatusSent},
		"Kafka":          {kafka.TopicRequested, kafka.TopicRetry, kafka.TopicDeadLetters, kafka.TopicStatus, kafka.DefaultGroup},
		"Amazon SQS":     {s.Send, s.DeadLetter, s.Status},
	} {
		spans, ok := rows[broker]
		require.True(t, ok, "docs/production.md's broker table has no %s row", broker)
		for _, name := range names {
			require.Contains(t, spans, name, "docs/production.md, broker table, %s: the name %s", broker, name)
		}
	}
	// The failed subject is written as a suffix of the sent one's stem.
	suffix := strings.TrimPrefix(n.StatusFailed, strings.TrimSuffix(n.StatusSent, ".sent"))
	require.True(t, slices.Contains(rows["NATS JetStream"], n.StatusFailed) || slices.Contains(rows["NATS JetStream"], suffix),
		"docs/production.md, broker table, NATS JetStream: the subject %s", n.StatusFailed)
}
