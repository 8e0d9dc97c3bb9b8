package consume

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"
)

// The defaults of Settings, the same for every broker.
const (
	DefaultPrefetch      = 10
	DefaultRetryDelay    = 30 * time.Second
	DefaultReconnectMin  = 100 * time.Millisecond
	DefaultReconnectMax  = 5 * time.Second
	DefaultShutdownGrace = 5 * time.Second
)

// Settings are what every broker transport is configured with, under the
// same names and with the same defaults; each transport's Config embeds
// them beside what is its own. Every field whose zero is meaningless gets
// its default from WithDefaults.
type Settings struct {
	// Prefix is prepended to the names of the broker's objects (queues,
	// exchanges, subjects, streams, topics, consumer groups), so that tests
	// and benchmarks get a topology of their own; each transport's Config
	// says which names and how. Default "", the production names.
	Prefix string
	// RetryDelays is the retry schedule: retry n waits RetryDelays[n-1],
	// the last one repeating for every later retry. Every process of an
	// installation must use the same schedule. Empty means the default.
	// Default [30s].
	RetryDelays []time.Duration
	// Prefetch is the number of deliveries a consumer holds at once and the
	// number of handler goroutines it runs. Zero would take nothing, so it
	// means the default. Default 10.
	Prefetch int
	// Logger receives what the transport cannot return to anybody:
	// connection failures (one per attempt, at WARN), settlements that
	// failed after their handler returned, objects it had to recreate.
	// Default: discard.
	Logger *slog.Logger
	// ReconnectMin is a consumer's first wait after a failed connection;
	// it doubles on each further failure, up to ReconnectMax. Zero would
	// reconnect in a busy loop, so it means the default. Defaults 100ms
	// and 5s.
	ReconnectMin, ReconnectMax time.Duration
	// ShutdownGrace bounds how long handlers in flight when a consumer's
	// context ends may still run: their context is cancelled only this
	// long after the stop began. Zero would cancel them mid-settlement, so
	// it means the default. Default 5s: with the hand-back that follows, a
	// process stops within 10s of SIGTERM, a usual grace before a SIGKILL.
	ShutdownGrace time.Duration
}

// WithDefaults returns s with every zero field that has a default set to
// it.
func (s Settings) WithDefaults() Settings {
	if len(s.RetryDelays) == 0 {
		s.RetryDelays = []time.Duration{DefaultRetryDelay}
	}
	s.Prefetch = cmp.Or(s.Prefetch, DefaultPrefetch)
	s.Logger = cmp.Or(s.Logger, slog.New(slog.DiscardHandler))
	s.ReconnectMin = cmp.Or(s.ReconnectMin, DefaultReconnectMin)
	s.ReconnectMax = cmp.Or(s.ReconnectMax, DefaultReconnectMax)
	s.ShutdownGrace = cmp.Or(s.ShutdownGrace, DefaultShutdownGrace)
	return s
}

// Validate reports the first setting no broker can work with, its message
// starting with name (the transport's, as "rabbitmq"). It is meant for
// settings WithDefaults has filled.
func (s Settings) Validate(name string) error {
	if len(s.RetryDelays) == 0 {
		return fmt.Errorf("%s: the retry schedule needs one delay at least", name)
	}
	for _, d := range s.RetryDelays {
		if d < 0 {
			return fmt.Errorf("%s: retry delays must not be negative, got %s", name, d)
		}
	}
	switch {
	case s.Prefetch < 1:
		return fmt.Errorf("%s: prefetch must be at least 1, got %d", name, s.Prefetch)
	case s.ReconnectMin <= 0 || s.ReconnectMax < s.ReconnectMin:
		return fmt.Errorf("%s: reconnect backoff must satisfy 0 < min <= max, got %s / %s", name, s.ReconnectMin, s.ReconnectMax)
	case s.ShutdownGrace <= 0:
		return fmt.Errorf("%s: shutdown grace must be positive, got %s", name, s.ShutdownGrace)
	}
	return nil
}
