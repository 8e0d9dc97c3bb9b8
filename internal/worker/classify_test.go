package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

// classify decides by the phase a failure happened in, as the sender
// marked it, and by the worker's own limits, never by the error's text.
func TestClassify(t *testing.T) {
	t.Parallel()
	plain := errors.New("500 Internal Server Error")
	down := notify.SenderDown(errors.New("dial tcp: connection refused"))
	throttled := notify.Throttled(errors.New("429"), 0)
	scopedDown := notify.ForDestination(down, "https://a:443")
	permanent := notify.Permanent(errors.New("550 no such user"))
	for _, tc := range []struct {
		name string
		f    sendFacts
		want string
	}{
		{"sent", sendFacts{maxRetries: 5}, notify.AttemptSent},
		{"sent on the last retry", sendFacts{retries: 5, maxRetries: 5}, notify.AttemptSent},
		{"a failure with retries left", sendFacts{err: plain, retries: 1, maxRetries: 5}, notify.AttemptRetry},
		{"a failure on the last retry", sendFacts{err: plain, retries: 5, maxRetries: 5}, notify.AttemptDead},
		{"a failure with no retries at all", sendFacts{err: plain, maxRetries: 0}, notify.AttemptDead},
		{"permanent", sendFacts{err: permanent, maxRetries: 5}, notify.AttemptDead},
		{"provider down", sendFacts{err: down, retries: 5, maxRetries: 5}, notify.AttemptDeferred},
		{"destination down", sendFacts{err: scopedDown, retries: 5, maxRetries: 5}, notify.AttemptDeferred},
		{"wrapped destination down", sendFacts{err: fmt.Errorf("send: %w", scopedDown), maxRetries: 5}, notify.AttemptDeferred},
		{"throttled", sendFacts{err: throttled, retries: 5, maxRetries: 5}, notify.AttemptDeferred},
		{"down spends an attempt when asked", sendFacts{err: down, retries: 1, maxRetries: 5, outageSpends: true}, notify.AttemptRetry},
		{"down on the last retry when it spends", sendFacts{err: down, retries: 5, maxRetries: 5, outageSpends: true}, notify.AttemptDead},
		{"throttled never spends", sendFacts{err: throttled, retries: 5, maxRetries: 5, outageSpends: true}, notify.AttemptDeferred},
		{"cut short by the worker stopping", sendFacts{err: context.Canceled, retries: 5, maxRetries: 5, stopping: true}, notify.AttemptDeferred},
		{"cut short by the lease", sendFacts{err: context.DeadlineExceeded, retries: 5, maxRetries: 5, ownLimit: true}, notify.AttemptDeferred},
		{"the sender's own timeout", sendFacts{err: context.DeadlineExceeded, retries: 1, maxRetries: 5}, notify.AttemptRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, classify(tc.f))
		})
	}
}

// A deferral is named by its kind, so that a run of one kind folds into
// one attempt row; the worker's own state comes before the error's mark.
func TestDeferralKind(t *testing.T) {
	t.Parallel()
	down := notify.ForDestination(notify.SenderDown(errors.New("dial tcp: connection refused")), "https://a:443")
	throttled := notify.Throttled(errors.New("429"), 0)
	for _, tc := range []struct {
		name string
		f    sendFacts
		want string
	}{
		{"destination down", sendFacts{err: down}, notify.DeferDown},
		{"provider down", sendFacts{err: notify.SenderDown(errors.New("EHLO refused"))}, notify.DeferDown},
		{"throttled", sendFacts{err: fmt.Errorf("send: %w", throttled)}, notify.DeferThrottled},
		{"the lease", sendFacts{err: context.DeadlineExceeded, ownLimit: true}, notify.DeferLimit},
		{"stopping", sendFacts{err: down, stopping: true}, notify.DeferStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, notify.AttemptDeferred, classify(tc.f))
			require.Equal(t, tc.want, deferral(tc.f))
		})
	}
}
