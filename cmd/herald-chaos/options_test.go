package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOptions checks the command line without any service.
func TestOptions(t *testing.T) {
	t.Setenv("HERALD_CHAOS_N", "42")
	t.Setenv("HERALD_CHAOS_TRANSPORTS", "")
	t.Setenv("HERALD_CHAOS_CLUSTER", "")
	o, err := parseOptions(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 42, o.n)
	require.Equal(t, []string{"table", "rabbitmq", "nats", "kafka"}, o.transports)
	require.Equal(t, 16, o.clients)
	require.NotZero(t, o.seed)

	o, err = parseOptions([]string{"--transport", "table", "--n", "7", "--seed", "9"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"table"}, o.transports)
	require.Equal(t, 7, o.n)
	require.EqualValues(t, 9, o.seed)

	o, err = parseOptions([]string{"--transport", "both"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"rabbitmq", "table"}, o.transports)

	t.Setenv("HERALD_CHAOS_TRANSPORTS", "kafka, nats")
	o, err = parseOptions(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"kafka", "nats"}, o.transports)

	t.Setenv("HERALD_CHAOS_CLUSTER", "1")
	o, err = parseOptions([]string{"--transport", "rabbitmq"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"rabbitmq", "rabbitmq-cluster"}, o.transports)

	for _, bad := range []string{"sqs", "", "table,"} {
		_, err = parseOptions([]string{"--transport", bad}, &bytes.Buffer{})
		if bad == "table," {
			require.NoError(t, err, "a trailing comma is harmless")
			continue
		}
		require.Error(t, err, bad)
	}
	_, err = parseOptions([]string{"--n", "0"}, &bytes.Buffer{})
	require.Error(t, err)
}
