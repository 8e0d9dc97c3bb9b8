package main

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every form a connection string takes in herald's settings, masked.
func TestRedactForms(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://u:hunter2@h/db", "postgres://u:xxxxx@h/db"},
		{"postgresql://u:hunter2@h:5432/db?sslmode=disable", "postgresql://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgres://u:hun@ter/2?x@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:hunter%402@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://h/db?user=u&password=hunter2&x=1", "postgres://h/db?user=u&password=xxxxx&x=1"},
		{"postgres://h/db?sslpassword=hunter2", "postgres://h/db?sslpassword=xxxxx"},
		{"host=db user=u password=hunter2 dbname=x", "host=db user=u password=xxxxx dbname=x"},
		{"host=db password='hunter 2' dbname=x", "host=db password=xxxxx dbname=x"},
		{`host=db password='it\'s' dbname=x`, "host=db password=xxxxx dbname=x"},
		{"Host=db;Password=hunter2;Database=x", "Host=db;Password=xxxxx;Database=x"},
		{"amqp://guest@h/", "amqp://guest@h/"},
		{"amqps://u:hunter2@h:5671/vhost", "amqps://u:xxxxx@h:5671/vhost"},
		{"amqp://u:hunter2@h1:5672/,amqp://u:hunter2@h2:5672/", "amqp://u:xxxxx@h1:5672/,amqp://u:xxxxx@h2:5672/"},
		{"nats://s3cr3t-token@h:4222", "nats://xxxxx@h:4222"},
		{"nats://u:hunter2@h1:4222,nats://u:hunter2@h2:4222", "nats://u:xxxxx@h1:4222,nats://u:xxxxx@h2:4222"},
		{"kafka://u:hunter2@h1:9092,h2:9092?mechanism=plain&tls=1", "kafka://u:xxxxx@h1:9092,h2:9092?mechanism=plain&tls=1"},
		{"sqs://eu-west-1/herald?endpoint=http://localhost:4100&secret_access_key=hunter2", "sqs://eu-west-1/herald?endpoint=http://localhost:4100&secret_access_key=xxxxx"},
		{"mongodb://u:hunter2@h1,h2,h3/herald?authSource=admin&replicaSet=rs0", "mongodb://u:xxxxx@h1,h2,h3/herald?authSource=admin&replicaSet=rs0"},
		{"mongodb+srv://u:hunter2@cluster.example.net/herald", "mongodb+srv://u:xxxxx@cluster.example.net/herald"},
		{"mongodb://h/db?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:hunter2", "mongodb://h/db?authMechanism=MONGODB-AWS&authMechanismProperties=xxxxx"},
		{"smtp://u:hunter2@smtp.example.com:587?tls=required", "smtp://u:xxxxx@smtp.example.com:587?tls=required"},
		{"smtps://apikey:hunter2@smtp.example.com", "smtps://apikey:xxxxx@smtp.example.com"},
		{"sqlite:herald.db", "sqlite:herald.db"},
		{"mbox:/var/mail/herald", "mbox:/var/mail/herald"},
		{"", ""},
	}
	for _, tt := range tests {
		got := redact(tt.in)
		require.Equal(t, tt.want, got, tt.in)
		require.NotContains(t, got, "hunter", tt.in)
		require.NotContains(t, got, "s3cr3t", tt.in)
	}
}

// The scrubber masks secrets inside free text (an error quoting a URL it
// could not parse), and the configured secrets wherever they appear.
func TestScrubber(t *testing.T) {
	t.Parallel()
	sc := newScrubber([]secretSource{
		{value: "postgres://u:p%40ss/w0rd@db/x"},
		{value: "amqp://guest:guest@h/"},
		{value: "whsec_abc123,whsec_def456", secret: true},
		{value: "nats://tok3n-value@h"},
	})
	for in, hidden := range map[string]string{
		`parse "postgres://u:p%40ss/w0rd@db/x": invalid port`: "w0rd",
		"dial: password p@ss/w0rd refused":                    "p@ss/w0rd",
		"signing with whsec_def456 failed":                    "whsec_def456",
		"nats: auth tok3n-value rejected":                     "tok3n-value",
		"connect host=db password=hunter2 failed":             "hunter2",
		"redial amqp://x:y-secret@h/ failed":                  "y-secret",
	} {
		got := sc.text(in)
		require.NotContains(t, got, hidden, in)
		require.Contains(t, got, masked, in)
	}
	// guest:guest: the password equal to the user is left to the patterns,
	// so the user name stays readable.
	require.Equal(t, "user guest connected", sc.text("user guest connected"))

	err := sc.err(fmt.Errorf("open: %w", usageError{errors.New("bad url amqp://u:hunter2@h")}))
	require.ErrorIs(t, err, errUsage)
	require.NotContains(t, err.Error(), "hunter2")
	var ue usageError
	require.True(t, errors.As(err, &ue))
}

// What a process logs, whatever wrote it, has the configuration's secrets
// masked; so has what any command returns.
func TestSecretsMaskedInLogsAndErrors(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	cfg := Config{DatabaseURL: "postgres://u:hunter2@db/x", APIToken: "tok-hunter3", LogFormat: "json"}
	log := newLogger(cfg, env{stderr: &buf})
	log.Warn("connect failed", "err", errors.New("auth hunter2 rejected"), "url", cfg.DatabaseURL, "header", "Bearer tok-hunter3")
	require.NotContains(t, buf.String(), "hunter")
	require.Contains(t, buf.String(), "postgres://u:xxxxx@db/x")

	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"outbox", "stats", "--database-url", "host=db password=hunter2"}, func(string) string { return "" }, &stdout, &stderr)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
	err = run(t.Context(), []string{"outbox", "stats"}, func(k string) string {
		if k == "HERALD_DATABASE_URL" {
			return "postgres://u:hunter2@127.0.0.1:1/x?connect_timeout=1"
		}
		return ""
	}, &stdout, &stderr)
	require.Error(t, err)
	require.NotContains(t, err.Error()+stdout.String()+stderr.String(), "hunter2")
}
