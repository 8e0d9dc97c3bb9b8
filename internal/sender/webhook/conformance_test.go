package webhook_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testkit/sendertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	sendertest.Run(t, sendertest.Harness{
		Start:      func(t *testing.T) sendertest.Peer { return startReceiver(t) },
		RetryAfter: 7 * time.Second,
		// One endpoint down or throttling pauses only deliveries to it.
		// The receivers' URLs name host and port already.
		Destination: func(m notify.Outgoing) string {
			u, err := url.Parse(m.To)
			require.NoError(t, err)
			return u.Scheme + "://" + u.Host
		},
	})
}
