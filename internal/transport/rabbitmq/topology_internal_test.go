package rabbitmq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseInequivalentArg(t *testing.T) {
	t.Parallel()
	const pre = "PRECONDITION_FAILED - inequivalent arg "
	for name, tc := range map[string]struct {
		reason string
		want   inequivalentArg
	}{
		"same type (3.10)": {
			pre + "'x-message-ttl' for queue 'notifications.retry' in vhost '/': received '1000' but current is '30000'",
			inequivalentArg{arg: "x-message-ttl", name: "notifications.retry", vhost: "/",
				received: argValue{true, "1000"}, current: argValue{true, "30000"}},
		},
		"current none": {
			pre + "'x-message-ttl' for queue 'notifications.retry' in vhost '/': received the value '1000' of type 'signedint' but current is none",
			inequivalentArg{arg: "x-message-ttl", name: "notifications.retry", vhost: "/",
				received: argValue{true, "1000"}},
		},
		"the current, other vhost": {
			pre + "'x-message-ttl' for queue 'notifications.retry' in vhost 'herald': received the value '1000' of type 'signedint' " +
				"but the current is the value '30000' of type 'long'",
			inequivalentArg{arg: "x-message-ttl", name: "notifications.retry", vhost: "herald",
				received: argValue{true, "1000"}, current: argValue{true, "30000"}},
		},
		"received none": {
			pre + "'x-dead-letter-strategy' for queue 'notifications.send' in vhost '/': received none but current is the value 'at-least-once' of type 'longstr'",
			inequivalentArg{arg: "x-dead-letter-strategy", name: "notifications.send", vhost: "/",
				current: argValue{true, "at-least-once"}},
		},
	} {
		got, ok := parseInequivalentArg(tc.reason)
		require.True(t, ok, name)
		require.Equal(t, tc.want, got, name)
	}
	_, ok := parseInequivalentArg("PRECONDITION_FAILED - queue 'x' in use")
	require.False(t, ok)
}

func TestRetryDelayHint(t *testing.T) {
	t.Parallel()
	top := NewTopology("", 0)
	hint := top.retryDelayHint(top.RetryQueue, inequivalentArg{vhost: "herald", current: argValue{true, "90000"}}, true)
	require.Contains(t, hint, "HERALD_RETRY_DELAY=1m30s as the other workers do")
	require.Contains(t, hint, "rabbitmqctl delete_queue -p herald notifications.retry;")
	hint = top.retryDelayHint(top.RetryQueue, inequivalentArg{vhost: "/"}, true)
	require.NotContains(t, hint, "as the other workers do", "a queue without TTL is none of herald's")
	require.Contains(t, hint, "rabbitmqctl delete_queue notifications.retry;")
}
