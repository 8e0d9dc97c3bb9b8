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
	env := map[string]string{"HERALD_RELAY_BATCH": "7", "HERALD_RETRY_DELAY": "2s", "HERALD_API_TOKEN": "sekrit"}
	getenv := func(k string) string { return env[k] }
	uses := join(storeFlags, relayFlags, apiFlags)

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
			require.Equal(t, 2*time.Second, c.RetryDelay)
			require.Equal(t, "sekrit", c.APIToken)
		}},
		{"flag over environment", []string{"--relay-batch", "9", "--retry-delay=3s"}, func(t *testing.T, c Config) {
			require.Equal(t, 9, c.RelayBatch)
			require.Equal(t, 3*time.Second, c.RetryDelay)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := parseConfig("relay", "", tt.args, getenv, &bytes.Buffer{}, nil, uses...)
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	for _, args := range [][]string{
		{"--relay-batch", "0"},
		{"--relay-batch", "x"},
		{"--retry-delay", "soon"},
		{"--debug-faults", "yes"},
		{"--no-such-flag"},
	} {
		_, _, err := parseConfig("relay", "", args, none, &bytes.Buffer{}, nil, join(storeFlags, relayFlags, apiFlags)...)
		require.Error(t, err, "%v", args)
	}
}

// --help prints the contract's defaults, never a secret from the
// environment.
func TestHelpHidesEnvironmentSecrets(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	getenv := func(k string) string {
		if k == "HERALD_API_TOKEN" || k == "HERALD_DATABASE_URL" {
			return "postgres://u:hunter2@db/x"
		}
		return ""
	}
	_, _, err := parseConfig("api", "", []string{"--help"}, getenv, &out, nil, join(storeFlags, apiFlags)...)
	require.True(t, errors.Is(err, flag.ErrHelp))
	require.NotContains(t, out.String(), "hunter2")
	require.Contains(t, out.String(), "HERALD_API_TOKEN")
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
