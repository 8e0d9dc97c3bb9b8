package nats

import (
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// A stream (either of them) declared as wanted is found the same on the next declare, so the
// declares of every start and reconnect send no update request (an update
// that races the stream's recovery after a restart crashes nats-server 2.9).
func TestDeclaredStreamNeedsNoUpdate(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	nc, err := natsgo.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cfg := Config{URL: srv.URL()}.withDefaults()
	topo := cfg.Topology()
	_, err = topo.declareStream(t.Context(), js, cfg)
	require.NoError(t, err)
	s, err := js.Stream(t.Context(), topo.Stream)
	require.NoError(t, err)
	require.True(t, sameStream(s.CachedInfo().Config, topo.streamConfig(cfg)), "%+v", s.CachedInfo().Config)
	_, err = topo.declareStatusStream(t.Context(), js, cfg)
	require.NoError(t, err)
	s, err = js.Stream(t.Context(), topo.StatusStream)
	require.NoError(t, err)
	require.True(t, sameStream(s.CachedInfo().Config, topo.statusStreamConfig(cfg)), "%+v", s.CachedInfo().Config)
}

// The status stream's age limit defaults to 7 days and must hold the
// duplicate window (the server refuses a stream whose window is longer than
// its age limit).
func TestStatusMaxAge(t *testing.T) {
	t.Parallel()
	cfg := Config{URL: "nats://127.0.0.1:4222"}.withDefaults()
	require.Equal(t, DefaultStatusMaxAge, cfg.StatusMaxAge)
	require.NoError(t, cfg.validate())
	require.Equal(t, cfg.StatusMaxAge, cfg.Topology().statusStreamConfig(cfg).MaxAge)
	cfg.StatusMaxAge = time.Minute
	require.ErrorContains(t, cfg.validate(), "status max age must not be shorter than the duplicate window")
}
