package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// kafkaStack is the production shape on Kafka: PostgreSQL, a three-broker
// kfake cluster in the test process (the herald processes reach it over
// TCP like any cluster), an SMTP server.
func kafkaStack(t *testing.T) *stack {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(3))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	s := &stack{t: t, db: pgtest.URL(t), smtp: smtptest.Start(t), dir: t.TempDir()}
	s.env = map[string]string{
		"HERALD_DATABASE_URL":   s.db,
		"HERALD_BROKER_URL":     "kafka://" + strings.Join(kc.ListenAddrs(), ","),
		"HERALD_SMTP_URL":       s.smtp.URL(),
		"HERALD_SMTP_FROM":      "herald@example.com",
		"HERALD_RELAY_INTERVAL": "200ms",
		"HERALD_RETRY_DELAY":    "300ms",
		"HERALD_MAX_RETRIES":    "1",
	}
	return s
}

// api, relay and worker deliver over Kafka, whatever order they start in
// (the worker first here: it creates the topics the relay then finds), the
// API's readiness checks the cluster, and a failing delivery is retried
// through notifications.retry and dead-lettered with its reason.
func TestKafkaEndToEnd(t *testing.T) {
	t.Parallel()
	s := kafkaStack(t)
	s.start("worker")
	s.start("relay")
	s.startAPI(nil)

	resp, err := http.Get(s.api.base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "readyz with the cluster up")

	var ids []string
	for range 10 {
		r := s.api.create(t, "b@example.com", nil)
		require.Equal(t, 201, r.Status, r.Body)
		ids = append(ids, r.ID)
	}
	want := map[string]int{}
	for _, id := range ids {
		n := s.waitStatus(id, "sent", 60*time.Second)
		require.Equal(t, 1, n.Attempts)
		want["<"+id+"@example.com>"] = 1
	}
	require.Equal(t, want, s.smtp.CountByMessageID())

	// 451 on every attempt: one retry after HERALD_RETRY_DELAY, then the
	// dead letters.
	s.smtp.Fail(451, "mailbox busy")
	r := s.api.create(t, "c@example.com", nil)
	require.Equal(t, 201, r.Status, r.Body)
	n := s.waitStatus(r.ID, "failed", 60*time.Second)
	require.Equal(t, 2, n.Attempts)
	require.NotNil(t, n.LastError)
	require.Contains(t, *n.LastError, "mailbox busy")
}
