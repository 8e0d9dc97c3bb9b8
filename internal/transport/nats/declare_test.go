package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/consume"
	natstr "github.com/heraldhq/herald/internal/transport/nats"
)

// DeclareStream, what a process runs at start, creates the stream; a
// stream it cannot bring to its settings is a permanent error (the process
// exits with the fix), an unreachable server is not.
func TestDeclareStreamAtStart(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cfg := config(t, srv)
	require.NoError(t, natstr.DeclareStream(ctx, cfg))
	require.NoError(t, natstr.DeclareStream(ctx, cfg), "idempotent")

	// Another stream already holds the subjects.
	other := config(t, srv)
	topo := other.Topology()
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: topo.Stream + "_squatter", Subjects: []string{topo.Requested}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), topo.Stream+"_squatter") })
	err = natstr.DeclareStream(ctx, other)
	require.ErrorIs(t, err, natstr.ErrTopologyMismatch)
	require.True(t, notify.IsPermanent(err), "%v", err)

	err = natstr.DeclareStream(ctx, natstr.Config{URL: "nats://127.0.0.1:1", Settings: consume.Settings{ReconnectMin: time.Millisecond, ReconnectMax: time.Millisecond}})
	require.Error(t, err)
	require.False(t, notify.IsPermanent(err), "an unreachable server is waited for: %v", err)
}
