package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOptions checks the command line without any service.
func TestOptions(t *testing.T) {
	t.Setenv("HERALD_CHAOS_N", "42")
	o, err := parseOptions(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 42, o.n)
	require.Equal(t, []string{"rabbitmq", "table"}, o.transports)
	require.Equal(t, 16, o.clients)
	require.NotZero(t, o.seed)

	o, err = parseOptions([]string{"--transport", "table", "--n", "7", "--seed", "9"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"table"}, o.transports)
	require.Equal(t, 7, o.n)
	require.EqualValues(t, 9, o.seed)

	_, err = parseOptions([]string{"--transport", "nats"}, &bytes.Buffer{})
	require.Error(t, err)
	_, err = parseOptions([]string{"--n", "0"}, &bytes.Buffer{})
	require.Error(t, err)
}
