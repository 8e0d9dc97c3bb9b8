// Package rawpublish measures each broker's raw publish ceiling: bare
// persistent publishes, acknowledged by the broker, of messages the size of
// herald's, through the broker's own client and without herald. herald
// bench divides the relay's rate by it.
//
// It is apart from package raw, which measures the database and the
// providers, because each transport's row in cmd/herald names its broker's
// ceiling: this package is linked into every herald binary, so it holds no
// test server and imports nothing of bench's. Everything here works on
// scratch objects named with the bench's own prefix, deleted afterwards.
package rawpublish

import (
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// cleanupTimeout bounds deleting a scratch stream, topic or queue, which
// runs even after the bench's context ended (an interrupted bench still
// cleans up).
const cleanupTimeout = 30 * time.Second

// requestedBody is the payload of a notification.requested event, as the
// relay publishes it, for an email the size of the bench's creates.
func requestedBody() ([]byte, error) {
	n := notify.NewNotification{Request: notify.CreateRequest{
		UserID:  "raw-0",
		Channel: notify.ChannelEmail,
		To:      "bench@example.com",
		Subject: "herald bench 0",
		Body:    "Hello,\nthis is a notification sent by herald bench to measure the stack.\n",
	}}
	return notify.RequestedPayload(n.Pending(1, time.Now()))
}
