package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/transport/rabbitmq"
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
