package main

import (
	"bytes"
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseConfigPrecedence(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"HERALD_RELAY_BATCH": "7", "HERALD_RETRY_DELAY": "2s", "HERALD_API_TOKEN": "sekrit"}
	getenv := func(k string) string { return vars[k] }

	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, c Config)
	}{
		{"defaults", nil, func(t *testing.T, c Config) {
			require.Equal(t, "sqlite:herald.db", c.DatabaseURL)
			require.Equal(t, 500*time.Millisecond, c.RelayInterval)
		}},
		{"environment over default", nil, func(t *testing.T, c Config) {
			require.Equal(t, 7, c.RelayBatch)
			require.Equal(t, []time.Duration{2 * time.Second}, c.RetryDelays)
			require.Equal(t, "sekrit", c.APIToken)
		}},
		{"flag over environment", []string{"--relay-batch", "9", "--retry-delay=3s"}, func(t *testing.T, c Config) {
			require.Equal(t, 9, c.RelayBatch)
			require.Equal(t, []time.Duration{3 * time.Second}, c.RetryDelays)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := parseConfig("serve", "", tt.args, env{getenv: getenv, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}, nil)
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

// HERALD_RETRY_DELAY takes a list, each delay positive, spaces allowed
// around the commas; one value is the one-delay schedule of old.
func TestParseConfigRetryDelays(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]time.Duration{
		"":                {30 * time.Second},
		"30s":             {30 * time.Second},
		"30s,5m,30m,2h":   {30 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour},
		" 1s , 2s,4s ":    {time.Second, 2 * time.Second, 4 * time.Second},
		"500ms,500ms,10s": {500 * time.Millisecond, 500 * time.Millisecond, 10 * time.Second},
	} {
		getenv := func(k string) string {
			if k == "HERALD_RETRY_DELAY" {
				return in
			}
			return ""
		}
		c, _, err := parseConfig("worker", "", nil, env{getenv: getenv, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}, nil)
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, c.RetryDelays, "%q", in)
	}
	var help bytes.Buffer
	_, _, err := parseConfig("worker", "", []string{"--help"}, env{getenv: func(string) string { return "" }, stdout: &help, stderr: &bytes.Buffer{}}, nil)
	require.ErrorIs(t, err, errHelp)
	require.Contains(t, help.String(), "--retry-delay durations")
	require.Contains(t, help.String(), "the last one repeating")
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	for _, args := range [][]string{
		{"--relay-batch", "0"},
		{"--relay-batch", "x"},
		{"--retry-delay", "soon"},
		{"--retry-delay", "30s,,5m"},
		{"--retry-delay", "30s,0s"},
		{"--retry-delay", "30s,-5m"},
		{"--retry-delay", "30s,soon"},
		{"--debug-faults=yes"},
		{"--no-such-flag"},
	} {
		_, _, err := parseConfig("serve", "", args, env{getenv: none, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}, nil)
		require.Error(t, err, "%v", args)
		require.ErrorIs(t, err, errUsage, "%v", args)
	}
}

// --help prints, on stdout, the value in effect (the environment's when
// set), typed, and never a secret from the environment.
func TestHelpHidesEnvironmentSecrets(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		switch k {
		case "HERALD_API_TOKEN", "HERALD_DATABASE_URL":
			return "postgres://u:hunter2@db/x"
		case "HERALD_ALERT_FOR":
			return "7m"
		}
		return ""
	}
	_, _, err := parseConfig("api", "", []string{"--help"}, env{getenv: getenv, stdout: &out, stderr: &errOut}, nil)
	require.True(t, errors.Is(err, flag.ErrHelp))
	require.Empty(t, errOut.String())
	require.NotContains(t, out.String(), "hunter2")
	require.Contains(t, out.String(), "HERALD_API_TOKEN=****")
	require.Contains(t, out.String(), "HERALD_DATABASE_URL=postgres://u:xxxxx@db/x")
	require.Contains(t, out.String(), "--alert-for duration")
	require.Contains(t, out.String(), "HERALD_ALERT_FOR=7m")
	require.Contains(t, out.String(), "--alert-backlog int")
}

// Flags may follow positional arguments, and "--" ends the flags.
func TestFlagsAnywhere(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	e := env{getenv: none, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	c, rest, err := parseConfig("dlq show", "", []string{"12", "--database-url", "sqlite:x.db"}, e, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"12"}, rest)
	require.Equal(t, "sqlite:x.db", c.DatabaseURL)
	_, rest, err = parseConfig("dlq show", "", []string{"--", "--database-url"}, e, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"--database-url"}, rest)
}

// A zero is honoured where it means something.
func TestZeroSettingsHonoured(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"HERALD_ALERT_BACKLOG": "0", "HERALD_MAX_RETRIES": "0", "HERALD_ALERT_FOR": "0s"}
	c, _, err := parseConfig("serve", "", nil, env{getenv: func(k string) string { return vars[k] }, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}, nil)
	require.NoError(t, err)
	require.Equal(t, 0, c.AlertBacklog)
	require.Equal(t, 0, c.MaxRetries)
	require.Zero(t, c.AlertFor)
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:p@h/db":                        "postgres://u:xxxxx@h/db",
		"postgres://u:p@ss@h/db":                     "postgres://u:xxxxx@h/db",
		"postgres://h/db?user=u&password=SECRET&x=1": "postgres://h/db?user=u&password=xxxxx&x=1",
		"amqp://guest@h/":                            "amqp://guest@h/",
		"sqlite:herald.db":                           "sqlite:herald.db",
	} {
		require.Equal(t, want, redact(in), in)
	}
}

func TestCrashHookSpec(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"before-send", "after-send:0", "after-commit:x"} {
		_, err := crashHook(bad, nil)
		require.Error(t, err, bad)
	}
	h, err := crashHook("", nil)
	require.NoError(t, err)
	require.Nil(t, h)
}

// A Telegram token without a chat id (or the reverse) is a start-up error,
// not a silently disabled alert channel.
func TestTelegramHalfConfiguredRefused(t *testing.T) {
	t.Parallel()
	for _, vars := range []map[string]string{
		{"HERALD_TELEGRAM_TOKEN": "123:abc"},
		{"HERALD_TELEGRAM_CHAT_ID": "42"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"api", "--database-url", "sqlite:" + t.TempDir() + "/x.db"}, func(k string) string { return vars[k] }, &stdout, &stderr)
		require.ErrorIs(t, err, errUsage, "%v", vars)
		require.ErrorContains(t, err, "HERALD_TELEGRAM_CHAT_ID")
		require.NotContains(t, err.Error(), "123:abc")
	}
}

// Unknown HERALD_* variables are named with the closest known one.
func TestUnknownVariables(t *testing.T) {
	t.Parallel()
	got := unknownVariables([]string{"HERALD_SMPT_URL=smtp://x", "HERALD_DATABASE_URL=sqlite:x", "HERALD_TEST_POSTGRES_URL=x", "PATH=/bin", "HERALD_ZZZZZZZZZZZZZZZZ=1"})
	require.Equal(t, []string{
		"unknown variable HERALD_SMPT_URL is ignored; did you mean HERALD_SMTP_URL?",
		"unknown variable HERALD_ZZZZZZZZZZZZZZZZ is ignored",
	}, got)
}

// A production worker without HERALD_SMTP_URL refuses to start instead of
// writing mail into a file nobody reads and marking it sent; mbox:PATH asks
// for the file by name.
func TestWorkerWithoutSMTPURLRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	vars := map[string]string{"HERALD_DATABASE_URL": "sqlite:" + dir + "/x.db"}
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"worker"}, func(k string) string { return vars[k] }, &stdout, &stderr)
	require.ErrorIs(t, err, errUsage)
	require.ErrorContains(t, err, "HERALD_SMTP_URL is unset")
	require.ErrorContains(t, err, "mbox:PATH")
	require.NoFileExists(t, dir+"/herald.mbox")
	require.NoFileExists(t, dir+"/x.db")

	vars["HERALD_SMTP_URL"] = "mbox:"
	_, _, err = newSender(Config{SMTPURL: vars["HERALD_SMTP_URL"]})
	require.ErrorIs(t, err, errUsage)
	require.ErrorContains(t, err, "mbox:PATH")
}

// HERALD_STATUS_EVENTS: auto writes status events where they have a
// destination; on and off decide alone, and off refuses a status webhook.
func TestWriteStatusEvents(t *testing.T) {
	t.Parallel()
	const hook = "http://127.0.0.1:9/status"
	for _, tc := range []struct {
		mode, broker, webhook string
		want, refused         bool
	}{
		{"auto", "", "", false, false},
		{"auto", "", hook, true, false},
		{"auto", "amqp://mq:5672/", "", true, false},
		{"on", "", "", true, false},
		{"on", "amqp://mq:5672/", hook, true, false},
		{"off", "amqp://mq:5672/", "", false, false},
		{"off", "", "", false, false},
		{"off", "", hook, false, true},
	} {
		cfg, _, err := parseConfig("worker", "", nil, env{getenv: func(k string) string {
			return map[string]string{"HERALD_STATUS_EVENTS": tc.mode, "HERALD_BROKER_URL": tc.broker, "HERALD_STATUS_WEBHOOK_URL": tc.webhook}[k]
		}}, nil)
		require.NoError(t, err)
		got, err := writeStatusEvents(cfg)
		if tc.refused {
			require.ErrorIs(t, err, errUsage, "%+v", tc)
			require.ErrorContains(t, err, "HERALD_STATUS_EVENTS=off")
			continue
		}
		require.NoError(t, err, "%+v", tc)
		require.Equal(t, tc.want, got, "%+v", tc)
	}
	_, _, err := parseConfig("worker", "", nil, env{getenv: func(k string) string {
		return map[string]string{"HERALD_STATUS_EVENTS": "sometimes"}[k]
	}}, nil)
	require.ErrorContains(t, err, "want one of auto, on, off")
}
