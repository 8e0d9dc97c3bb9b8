package handover_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/sender/handover"
	"github.com/heraldhq/herald/internal/testkit/proctest"
)

func TestTraceOfAnAnsweredRequest(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	var tr handover.Trace
	req, err := http.NewRequestWithContext(tr.Context(t.Context()), http.MethodPost, srv.URL, nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.True(t, tr.Connected())
	assert.True(t, tr.Wrote())
	assert.False(t, tr.Stalled(t.Context(), nil))
}

func TestTraceOfARefusedConnection(t *testing.T) {
	t.Parallel()
	addr, err := proctest.FreeAddr() // nothing listens there
	require.NoError(t, err)
	var tr handover.Trace
	req, err := http.NewRequestWithContext(tr.Context(t.Context()), http.MethodPost, "http://"+addr, nil)
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err)
	assert.False(t, tr.Connected())
	assert.False(t, tr.Wrote())
	assert.False(t, tr.Stalled(t.Context(), err), "a refusal is no deadline")
	assert.Contains(t, tr.Unfinished(), "no connection in time")
}

func TestTraceOfARequestNobodyTakes(t *testing.T) {
	t.Parallel()
	// A listener that accepts and never reads: the connection is had, the
	// server answers nothing, and the deadline passes.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		_ = l.Close()
	})
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		<-done
		_ = c.Close()
	}()
	var tr handover.Trace
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(tr.Context(ctx), http.MethodPost, "http://"+l.Addr().String(), nil)
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err)
	assert.True(t, tr.Connected())
	// A small request fits the socket's buffer: it was written, so a
	// deadline now is the message's attempt, not a stall.
	assert.True(t, tr.Wrote())
	assert.False(t, tr.Stalled(ctx, err))
	assert.Equal(t, "the request not taken in time,", tr.Unfinished())
}

func TestTraceOfADeadlinePassedBeforeTheHandOver(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	var tr handover.Trace
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(tr.Context(ctx), http.MethodPost, srv.URL, nil)
	require.NoError(t, err)
	_, err = srv.Client().Do(req)
	require.Error(t, err)
	assert.False(t, tr.Wrote())
	assert.True(t, tr.Stalled(ctx, err), "the provider never took the request")
}
