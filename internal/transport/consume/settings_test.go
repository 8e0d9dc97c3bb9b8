package consume_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/transport/consume"
)

// A zero Settings gets every default; one with values keeps them.
func TestSettingsDefaults(t *testing.T) {
	t.Parallel()
	s := consume.Settings{}.WithDefaults()
	require.Equal(t, []time.Duration{consume.DefaultRetryDelay}, s.RetryDelays)
	require.Equal(t, consume.DefaultPrefetch, s.Prefetch)
	require.Equal(t, consume.DefaultReconnectMin, s.ReconnectMin)
	require.Equal(t, consume.DefaultReconnectMax, s.ReconnectMax)
	require.Equal(t, consume.DefaultShutdownGrace, s.ShutdownGrace)
	require.NotNil(t, s.Logger)
	require.Empty(t, s.Prefix)
	require.NoError(t, s.Validate("test"))

	given := consume.Settings{Prefix: "p.", RetryDelays: []time.Duration{0, time.Minute}, Prefetch: 3, ReconnectMin: time.Second, ReconnectMax: time.Minute, ShutdownGrace: time.Second}
	got := given.WithDefaults()
	got.Logger = nil
	require.Equal(t, given, got)
	require.NoError(t, got.Validate("test"), "a zero delay is a retry due at once")
}

// Validate names the transport and the setting no broker can work with.
func TestSettingsValidate(t *testing.T) {
	t.Parallel()
	ok := consume.Settings{}.WithDefaults()
	for name, c := range map[string]struct {
		mod  func(*consume.Settings)
		want string
	}{
		"negative delay": {func(s *consume.Settings) { s.RetryDelays = []time.Duration{time.Second, -time.Second} }, "retry delays must not be negative"},
		"no delay":       {func(s *consume.Settings) { s.RetryDelays = []time.Duration{} }, "the retry schedule needs one delay at least"},
		"prefetch":       {func(s *consume.Settings) { s.Prefetch = -1 }, "prefetch must be at least 1"},
		"backoff min":    {func(s *consume.Settings) { s.ReconnectMin = -time.Second }, "reconnect backoff"},
		"backoff order":  {func(s *consume.Settings) { s.ReconnectMin, s.ReconnectMax = time.Second, time.Millisecond }, "reconnect backoff"},
		"shutdown grace": {func(s *consume.Settings) { s.ShutdownGrace = -time.Second }, "shutdown grace must be positive"},
	} {
		s := ok
		c.mod(&s)
		err := s.Validate("nats")
		require.ErrorContains(t, err, "nats: "+c.want, name)
	}
}
