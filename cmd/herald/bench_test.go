//go:build !nobench

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.mongodb.org/mongo-driver/v2/bson"
	mgo "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/heraldhq/herald/internal/testkit/mongotest"
	"github.com/heraldhq/herald/internal/testkit/sqstest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
)

// benchFields are the fields `herald bench --json` promises.
var benchFields = []string{
	"store", "transport", "n", "concurrency",
	"api_per_s", "api_p50_ms", "api_p99_ms",
	"e2e_p50_ms", "e2e_p99_ms", "e2e_max_ms",
	"relay_per_s", "delivered_per_s", "drain_s",
	"raw_tx_per_s", "raw_publish_per_s", "api_vs_raw_tx", "relay_vs_raw_publish",
	"smtp_latency_ms", "sends_in_flight_max", "db_conns_max",
	"preload", "seq_scans_per_1k_deliveries",
	"raw_pipeline_per_s", "delivered_vs_raw_pipeline",
	"rows_per_notification", "commits_per_notification", "wal_bytes_per_notification",
	"channel", "receiver_latency_ms", "raw_post_per_s", "raw_post_clients", "delivered_vs_raw_post",
}

// runBench runs herald bench in-process with env as its whole environment
// and returns the decoded JSON report and what it wrote on stderr.
func runBench(t *testing.T, env map[string]string, args ...string) (map[string]any, string) {
	t.Helper()
	// Room for a delivery that comes back after its visibility timeout
	// (an SQS receive whose answer was lost), in the warm-up and the run.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := cmdBench(ctx, args, env2(env, &stdout, &stderr))
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	var report map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &report), "stdout: %s", stdout.String())
	require.Equal(t, 1, bytes.Count(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))+1, "one JSON line: %s", stdout.String())
	for _, f := range benchFields {
		require.Contains(t, report, f)
	}
	return report, stderr.String()
}

func env2(vars map[string]string, stdout, stderr *bytes.Buffer) env {
	return env{getenv: func(k string) string { return vars[k] }, stdout: stdout, stderr: stderr}
}

// positive requires the named numeric fields to be above zero.
func positive(t *testing.T, report map[string]any, fields ...string) {
	t.Helper()
	for _, f := range fields {
		v, ok := report[f].(float64)
		require.True(t, ok, "%s is a number: %v", f, report[f])
		require.Greater(t, v, 0.0, "%s", f)
	}
}

func TestBenchSmoke(t *testing.T) {
	t.Parallel()
	t.Run("postgres+rabbitmq", func(t *testing.T) {
		t.Parallel()
		admin := testenv.Require(t, testenv.PostgresVar)
		amqpURL := testenv.Require(t, testenv.AMQPVar)
		report, stderr := runBench(t, map[string]string{
			"HERALD_DATABASE_URL": admin,
			"HERALD_BROKER_URL":   amqpURL,
		}, "--n", "200", "--concurrency", "4", "--smtp-latency", "20ms", "--stats-settle", "0", "--json")
		require.Equal(t, "postgres", report["store"])
		require.EqualValues(t, 20, report["smtp_latency_ms"])
		positive(t, report, "sends_in_flight_max", "db_conns_max")
		require.Equal(t, "rabbitmq", report["transport"])
		require.EqualValues(t, 200, report["accepted"])
		require.EqualValues(t, 200, report["delivered"])
		positive(t, report, "api_per_s", "api_p50_ms", "api_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "e2e_max_ms",
			"relay_per_s", "delivered_per_s", "raw_tx_per_s", "raw_publish_per_s", "api_vs_raw_tx", "relay_vs_raw_publish",
			"raw_pipeline_per_s", "delivered_vs_raw_pipeline", "rows_per_notification", "commits_per_notification", "wal_bytes_per_notification")
		// A notification writes a handful of rows on its way; the figure
		// is no count of every row in the database.
		require.Less(t, report["rows_per_notification"], 50.0)
		m := regexp.MustCompile(`scratch database (herald_bench_[0-9a-f]+) and scratch broker names (bench-[0-9a-f]+\.)\*`).FindStringSubmatch(stderr)
		require.NotNil(t, m, "stderr names the scratch objects: %s", stderr)
		requireDatabaseGone(t, admin, m[1])
		requireQueuesGone(t, amqpURL, m[2])
	})
	t.Run("sqlite+sqs", func(t *testing.T) {
		t.Parallel()
		srv := sqstest.Start(t)
		report, stderr := runBench(t, map[string]string{
			"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "user.db"),
			"HERALD_BROKER_URL":   srv.BrokerURL("notifications", false),
			// A 5s send timeout makes the queue's visibility timeout 45s:
			// what a receive whose answer is lost costs its messages.
			"HERALD_SMTP_TIMEOUT": "5s",
		}, "--n", "200", "--concurrency", "4", "--stats-settle", "0", "--json")
		require.Equal(t, "sqs", report["transport"])
		require.EqualValues(t, 200, report["delivered"])
		positive(t, report, "relay_per_s", "delivered_per_s", "raw_publish_per_s", "relay_vs_raw_publish")
		m := regexp.MustCompile(`scratch broker names (bench-[0-9a-f]+)\.\*`).FindStringSubmatch(stderr)
		require.NotNil(t, m, "stderr names the scratch objects: %s", stderr)
		for _, q := range []string{"-notifications-send", "-notifications-send-dlq", "-notifications-raw"} {
			_, ok := sqstest.Queue(m[1] + q)
			require.False(t, ok, "queue %s%s left behind", m[1], q)
		}
	})
	t.Run("sqlite+kafka", func(t *testing.T) {
		t.Parallel()
		// A three-broker kfake cluster in the test process, reached over
		// TCP like any cluster: the Kafka row's hook (the raw produce
		// ceiling and the scratch topics' removal) runs as against Kafka.
		kc, err := kfake.NewCluster(kfake.NumBrokers(3))
		require.NoError(t, err)
		t.Cleanup(kc.Close)
		report, stderr := runBench(t, map[string]string{
			"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "user.db"),
			"HERALD_BROKER_URL":   "kafka://" + strings.Join(kc.ListenAddrs(), ","),
		}, "--n", "200", "--concurrency", "4", "--stats-settle", "0", "--json")
		require.Equal(t, "kafka", report["transport"])
		require.EqualValues(t, 200, report["delivered"])
		positive(t, report, "relay_per_s", "delivered_per_s", "raw_publish_per_s", "relay_vs_raw_publish")
		m := regexp.MustCompile(`scratch broker names (bench-[0-9a-f]+\.)\*`).FindStringSubmatch(stderr)
		require.NotNil(t, m, "stderr names the scratch objects: %s", stderr)
		cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
		require.NoError(t, err)
		defer cl.Close()
		topics, err := kadm.NewClient(cl).ListTopics(t.Context())
		require.NoError(t, err)
		for _, name := range topics.Names() {
			require.False(t, strings.HasPrefix(name, m[1]), "scratch topic %s left behind", name)
		}
	})
	t.Run("mongodb+table", func(t *testing.T) {
		t.Parallel()
		dbAddr := freeAddr(t)
		fdb, err := mongotest.StartFerret(dbAddr, t.TempDir())
		require.NoError(t, err)
		t.Cleanup(func() { fdb.Stop() })
		report, stderr := runBench(t, map[string]string{"HERALD_DATABASE_URL": "mongodb://" + dbAddr + "/herald"}, "--n", "100", "--concurrency", "4", "--warmup", "0", "--json")
		require.Equal(t, "mongodb", report["store"])
		require.EqualValues(t, 100, report["delivered"])
		positive(t, report, "delivered_per_s", "raw_pipeline_per_s")
		// No raw transaction ceiling and no statistics views: zero and
		// null, each with its note.
		require.Zero(t, report["raw_tx_per_s"])
		require.Nil(t, report["rows_per_notification"])
		notes := fmt.Sprint(report["notes"])
		require.Contains(t, notes, "MongoDB: no raw transaction ceiling")
		require.Contains(t, notes, "MongoDB: rows_per_notification")
		m := regexp.MustCompile(`scratch database (bench_bench-[0-9a-f]+|bench_[0-9a-z_]+)`).FindStringSubmatch(stderr)
		require.NotNil(t, m, "stderr names the scratch database: %s", stderr)
		c, err := mgo.Connect(options.Client().ApplyURI(fdb.URI))
		require.NoError(t, err)
		defer func() { _ = c.Disconnect(context.Background()) }()
		names, err := c.ListDatabaseNames(t.Context(), bson.D{})
		require.NoError(t, err)
		for _, n := range names {
			require.False(t, strings.HasPrefix(n, "bench_"), "scratch database %s left behind (stderr named %s)", n, m[1])
		}
	})
	t.Run("sqlite+table", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		userDB := filepath.Join(dir, "user.db")
		report, _ := runBench(t, map[string]string{"HERALD_DATABASE_URL": "sqlite:" + userDB}, "--n", "200", "--json")
		require.Equal(t, "sqlite", report["store"])
		require.Equal(t, "table", report["transport"])
		require.EqualValues(t, 200, report["accepted"])
		require.EqualValues(t, 200, report["delivered"])
		positive(t, report, "api_per_s", "api_p99_ms", "e2e_p99_ms", "delivered_per_s", "raw_tx_per_s", "api_vs_raw_tx", "sends_in_flight_max",
			"raw_pipeline_per_s", "delivered_vs_raw_pipeline")
		// Not measured on SQLite: null, with a note.
		require.Nil(t, report["rows_per_notification"])
		require.Nil(t, report["commits_per_notification"])
		require.Nil(t, report["wal_bytes_per_notification"])
		require.Zero(t, report["db_conns_max"])
		require.Zero(t, report["raw_publish_per_s"])
		require.Zero(t, report["relay_per_s"])
		require.NotEmpty(t, report["notes"], "a note says why the publish numbers are 0")
		// The bench works in a scratch file: the configured database is
		// never created, let alone written.
		_, err := os.Stat(userDB)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

// A tiny webhook bench, end to end: herald's webhooks reach the receiver
// on loopback signed with the run's secret (the receiver checks each one),
// every accepted notification is there, and the raw POST ceiling stands
// beside delivered/s. Telegram the same way, against the Bot API receiver.
func TestBenchChannels(t *testing.T) {
	t.Parallel()
	t.Run("webhook", func(t *testing.T) {
		t.Parallel()
		const latency = 20
		dir := t.TempDir()
		userMbox := filepath.Join(dir, "user.mbox")
		report, stderr := runBench(t, map[string]string{"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(dir, "user.db"), "HERALD_SMTP_URL": "mbox:" + userMbox},
			"--channel", "webhook", "--receiver-latency", "20ms", "--n", "120", "--warmup", "10", "--concurrency", "4", "--json")
		require.Equal(t, "webhook", report["channel"])
		require.EqualValues(t, 120, report["accepted"])
		require.EqualValues(t, 120, report["delivered"])
		require.EqualValues(t, latency, report["receiver_latency_ms"])
		require.Zero(t, report["smtp_latency_ms"])
		require.EqualValues(t, 32, report["raw_post_clients"], "HERALD_PREFETCH's default: the worker's most sends at once")
		positive(t, report, "delivered_per_s", "raw_post_per_s", "delivered_vs_raw_post", "sends_in_flight_max")
		// Every POST waits 20 ms at the receiver: 32 at once cannot pass
		// 1,600/s, and no webhook is delivered sooner than 20 ms after its
		// create was answered.
		require.Less(t, report["raw_post_per_s"], 1600.0)
		require.GreaterOrEqual(t, report["e2e_p50_ms"], float64(latency))
		require.Contains(t, fmt.Sprint(report["notes"]), "signature was checked by the receiver")
		require.NotContains(t, fmt.Sprint(report)+stderr, "whsec_", "the run's secret is never printed")
		// The email channel, enabled all the same, has a sink of its own:
		// the user's mail target is never opened.
		_, err := os.Stat(userMbox)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("telegram", func(t *testing.T) {
		t.Parallel()
		report, _ := runBench(t, map[string]string{"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "user.db")},
			"--channel", "telegram", "--n", "60", "--warmup", "10", "--concurrency", "4", "--json")
		require.Equal(t, "telegram", report["channel"])
		require.EqualValues(t, 60, report["delivered"])
		positive(t, report, "delivered_per_s", "raw_post_per_s", "delivered_vs_raw_post")
	})
}

// --find-rate probes rates on the stack and reports the highest it held:
// with windows this short the figure means nothing, but the search runs,
// prints each probe and ends within its budget.
func TestBenchFindRate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := cmdBench(ctx, []string{"--find-rate", "--find-window", "200ms", "--find-start", "50", "--find-timeout", "8s", "--warmup", "20", "--json"},
		env2(map[string]string{"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(dir, "user.db")}, &stdout, &stderr))
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	var search struct {
		Store     string  `json:"store"`
		Transport string  `json:"transport"`
		Rate      float64 `json:"sustainable_rate_per_s"`
		Failing   float64 `json:"lowest_failing_rate_per_s"`
		Probes    []struct {
			Rate     float64 `json:"rate_per_s"`
			Accepted int     `json:"accepted"`
			Holds    bool    `json:"holds"`
		} `json:"probes"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &search), "stdout: %s", stdout.String())
	require.Equal(t, "sqlite", search.Store)
	require.Equal(t, "table", search.Transport)
	require.NotEmpty(t, search.Probes)
	require.Equal(t, 50.0, search.Probes[0].Rate)
	for _, p := range search.Probes {
		require.Positive(t, p.Accepted)
		if p.Holds {
			require.LessOrEqual(t, p.Rate, search.Rate)
		}
	}
	require.Equal(t, len(search.Probes), strings.Count(stderr.String(), "herald bench: probe "), "each probe printed: %s", stderr.String())
}

// A bench on a preloaded database delivers what it creates beside the
// history and says what it ran on.
func TestBenchPreload(t *testing.T) {
	t.Parallel()
	admin := testenv.Require(t, testenv.PostgresVar)
	report, stderr := runBench(t, map[string]string{"HERALD_DATABASE_URL": admin},
		"--preload", "500", "--n", "100", "--warmup", "20", "--concurrency", "4", "--stats-settle", "0", "--json")
	require.Equal(t, "postgres", report["store"])
	require.Equal(t, "table", report["transport"])
	require.EqualValues(t, 500, report["preload"])
	require.EqualValues(t, 100, report["delivered"])
	require.Contains(t, report, "seq_scans_per_1k_deliveries")
	require.Contains(t, stderr, "preloaded 500 sent notifications")
	m := regexp.MustCompile(`scratch database (herald_bench_[0-9a-f]+)`).FindStringSubmatch(stderr)
	require.NotNil(t, m, "stderr names the scratch database: %s", stderr)
	requireDatabaseGone(t, admin, m[1])
}

// A broadcast accepts its bulk notifications in batches, delivers each of
// them and every high-priority one made beside them once, measures the raw
// insert ceiling and reports both phases of the high ones.
func TestBenchBroadcast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, transport string
		env             func(t *testing.T) map[string]string
	}{
		{"sqlite+table", "table", func(t *testing.T) map[string]string {
			return map[string]string{"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "user.db")}
		}},
		{"postgres+rabbitmq", "rabbitmq", func(t *testing.T) map[string]string {
			return map[string]string{"HERALD_DATABASE_URL": testenv.Require(t, testenv.PostgresVar), "HERALD_BROKER_URL": testenv.Require(t, testenv.AMQPVar)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			err := cmdBench(ctx, []string{"--broadcast", "--n", "3000", "--batch-size", "500", "--concurrency", "2", "--high-rate", "50", "--warmup", "20", "--json"},
				env2(tc.env(t), &stdout, &stderr))
			require.NoError(t, err, "stderr:\n%s", stderr.String())
			var r map[string]any
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &r), "stdout: %s", stdout.String())
			require.Equal(t, tc.transport, r["transport"])
			require.EqualValues(t, 3000, r["accepted"])
			require.EqualValues(t, 3000, r["delivered"])
			require.EqualValues(t, 0, r["rejected"])
			require.EqualValues(t, 0, r["repeats"])
			require.EqualValues(t, 500, r["batch_size"])
			positive(t, r, "accept_s", "accept_per_s", "raw_insert_per_s", "accept_vs_raw_insert", "delivered_per_s")
			// High notifications were made while bulk ones waited, and
			// each was delivered (Broadcast fails on a missing one).
			require.Positive(t, r["high_accept_n"].(float64)+r["high_drain_n"].(float64), "stdout: %s", stdout.String())
		})
	}
}

// requireDatabaseGone checks that the bench dropped its scratch database.
func requireDatabaseGone(t *testing.T, admin, name string) {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n))
	require.Zero(t, n, "scratch database %s left behind", name)
}

// requireQueuesGone checks that the bench deleted its scratch queues: the
// topology's and the raw publish ceiling's.
func requireQueuesGone(t *testing.T, amqpURL, prefix string) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	topo := rabbitmq.NewTopology(prefix, time.Second)
	for _, q := range []string{topo.SendQueue, topo.RetryQueue, topo.DeadLetterQueue, prefix + "raw"} {
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		var aerr *amqp.Error
		require.ErrorAs(t, err, &aerr, "queue %s left behind", q)
		require.Equal(t, amqp.NotFound, aerr.Code, "queue %s", q)
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	t.Parallel()
	// --preload is PostgreSQL's only: the URL below is SQLite.
	for _, args := range [][]string{{"--n", "0"}, {"--concurrency", "0"}, {"--rate", "-1"}, {"--smtp-latency", "-1s"}, {"--preload", "-1"}, {"--preload", "10"},
		{"--stats-settle", "-1s"}, {"--find-rate", "--find-window", "0s"}, {"--find-rate", "--find-start", "0"},
		{"--channel", "sms"}, {"--channel", "webhook", "--smtp-latency", "1s"}, {"--receiver-latency", "1s"}, {"--channel", "webhook", "--receiver-latency", "-1s"},
		{"--broadcast", "--find-rate"}, {"--broadcast", "--rate", "10"}, {"--broadcast", "--batch-size", "0"}, {"--broadcast", "--batch-size", "1001"}, {"--broadcast", "--high-rate", "-1"}} {
		var stdout, stderr bytes.Buffer
		err := cmdBench(t.Context(), args, env2(map[string]string{"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "x.db")}, &stdout, &stderr))
		require.Error(t, err, "%v", args)
		require.Empty(t, stdout.String())
	}
	// The refusal names the engines whose rows have a preload.
	var stdout, stderr bytes.Buffer
	err := cmdBench(t.Context(), []string{"--preload", "10"}, env2(map[string]string{"HERALD_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "x.db")}, &stdout, &stderr))
	require.ErrorContains(t, err, "--preload: supported on PostgreSQL only")
}
