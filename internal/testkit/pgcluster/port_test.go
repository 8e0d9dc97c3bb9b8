package pgcluster

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// A new server whose port another process took between the pick and the
// bind starts on another port instead of failing.
func TestStartNewPortTaken(t *testing.T) {
	if _, err := Binaries(); err != nil {
		if os.Getenv(testenv.RequireVar) == "1" {
			t.Fatalf("PostgreSQL binaries required: %v", err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := newCluster("port_taken")
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.NoError(t, c.run(ctx, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-instructions"))
	taken := c.port
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)))
	require.NoError(t, err, "take the port the cluster picked")
	defer ln.Close()
	go func() { // a thief that hangs up on whoever calls
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()

	require.NoError(t, c.startNew(ctx, map[string]string{}))
	require.NotEqual(t, taken, c.port, "started on another port")
	require.True(t, c.Running())
}
