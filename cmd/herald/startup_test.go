package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A dependency's state is logged at the first check and at every change,
// never while it stays the same.
func TestReachabilityLogsChanges(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	var r reachability
	var got []string
	for _, err := range []error{down, down, nil, nil, down, nil} {
		if level, msg, ok := r.observe("broker", err); ok {
			got = append(got, level.String()+" "+msg)
		}
	}
	require.Equal(t, []string{"WARN broker unreachable", "INFO broker reachable again", "WARN broker unreachable", "INFO broker reachable again"}, got)

	r = reachability{}
	level, msg, ok := r.observe("database", nil)
	require.True(t, ok)
	require.Equal(t, slog.LevelInfo, level)
	require.Equal(t, "database reachable", msg)
	_, _, ok = r.observe("database", nil)
	require.False(t, ok)
}

// The start-up record names the database and broker hosts without
// secrets, and only the settings of the command: a relay names no sender,
// no prefetch.
func TestStartupRecordNamesOnlyWhatTheProcessUses(t *testing.T) {
	t.Parallel()
	cfg, _, err := parseConfig("serve", "", nil, env{getenv: func(k string) string {
		return map[string]string{
			"HERALD_DATABASE_URL": "postgres://herald:hunter2@db.internal:5432/herald?sslmode=require",
			"HERALD_BROKER_URL":   "amqp://herald:hunter3@mq.internal:5672/prod",
			"HERALD_API_TOKEN":    "tok-hunter4",
			"HERALD_SMTP_URL":     "smtp://u:hunter5@smtp.example.com:587",
		}[k]
	}}, nil)
	require.NoError(t, err)
	record := func(cmd string, roles ...role) map[string]string {
		attrs := startupRecord(cmd, cfg, roles, "rabbitmq")
		m := map[string]string{}
		for i := 0; i < len(attrs); i += 2 {
			m[attrs[i].(string)] = fmt.Sprint(attrs[i+1])
		}
		require.NotContains(t, fmt.Sprint(attrs), "hunter")
		return m
	}
	relay := record("relay", roleRelay)
	require.Equal(t, "postgres://db.internal:5432/herald?sslmode=require", relay["database"])
	require.Equal(t, "amqp://mq.internal:5672/prod", relay["broker"])
	for _, absent := range []string{"sender", "HERALD_PREFETCH", "HERALD_SMTP_URL", "HERALD_HTTP_ADDR", "HERALD_API_TOKEN"} {
		require.NotContains(t, relay, absent)
	}
	require.Equal(t, "100", relay["HERALD_RELAY_BATCH"])
	require.Equal(t, "30s", relay["HERALD_RETRY_DELAY"])

	worker := record("worker", roleWorker)
	require.Equal(t, "32", worker["HERALD_PREFETCH"])
	require.Equal(t, "smtp smtp://u:xxxxx@smtp.example.com:587", worker["sender"])
	require.NotContains(t, worker, "HERALD_RELAY_BATCH")

	api := record("api", roleAPI)
	require.Equal(t, "****", api["HERALD_API_TOKEN"])
	require.NotContains(t, api, "HERALD_PREFETCH")
}

func TestWhere(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:hunter2@db:5432/x":           "postgres://db:5432/x",
		"amqp://u:p@h1/,amqp://u:p@h2/":            "amqp://h1/,amqp://h2/",
		"nats://token@h:4222":                      "nats://h:4222",
		"kafka://u:p@h1:9092,h2:9092":              "kafka://h1:9092,h2:9092",
		"sqlite:herald.db":                         "sqlite:herald.db",
		"mongodb://u:p@h/db?authSource=admin":      "mongodb://h/db?authSource=admin",
		"sqs://eu-west-1/herald?endpoint=http://x": "sqs://eu-west-1/herald?endpoint=http://x",
	} {
		require.Equal(t, want, where(in), in)
	}
}

// The start-up block of serve names the console's URL (localhost for a
// listener on every interface, and the login when a token is set) and the
// channels enabled, with what enables the others.
func TestStartupBlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
		not  []string
	}{
		{"defaults", Config{HTTPAddr: "127.0.0.1:8080", DatabaseURL: "sqlite:herald.db"}, []string{
			"  api        http://127.0.0.1:8080\n",
			"  console    http://127.0.0.1:8080/ui\n",
			"  channels   email                              HERALD_WEBHOOK_SECRET=... for webhook, HERALD_TELEGRAM_BOT_TOKEN=... for telegram\n",
		}, nil},
		{"every interface, a token, webhook", Config{HTTPAddr: ":9090", DatabaseURL: "sqlite:herald.db", APIToken: "s3cret", WebhookSecret: "whsec_x"}, []string{
			"  api        http://localhost:9090\n",
			"  console    http://localhost:9090/ui (log in with HERALD_API_TOKEN)\n",
			"  channels   email, webhook                     HERALD_TELEGRAM_BOT_TOKEN=... for telegram\n",
		}, []string{"s3cret", "whsec_x"}},
		{"every channel", Config{HTTPAddr: "[::]:8080", DatabaseURL: "sqlite:herald.db", WebhookSecret: "whsec_x", TelegramBotToken: "t"}, []string{
			"  console    http://localhost:8080/ui\n",
			"  channels   email, webhook, telegram\n",
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			(&app{cfg: tc.cfg}).logStartup(&b)
			for _, w := range tc.want {
				require.Contains(t, b.String(), w)
			}
			for _, n := range tc.not {
				require.NotContains(t, b.String(), n)
			}
		})
	}
}
