package bench

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// The channels a bench can load, as the API names them.
const (
	ChannelEmail    = "email"
	ChannelWebhook  = "webhook"
	ChannelTelegram = "telegram"
)

// Channels lists the channels a bench can load, email first.
var Channels = []string{ChannelEmail, ChannelWebhook, ChannelTelegram}

// targetDefaults returns the channel, destination and stall timeout of a
// load (Run's or Broadcast's) with their defaults: email, to
// bench@example.com when the channel is email, and 60s.
func targetDefaults(channel, to string, stall time.Duration) (string, string, time.Duration) {
	if channel == "" {
		channel = ChannelEmail
	}
	if to == "" && channel == ChannelEmail {
		to = "bench@example.com"
	}
	if stall == 0 {
		stall = 60 * time.Second
	}
	return channel, to, stall
}

// checkRequests checks what every load needs to send anything: the API's
// URL and at least one notification.
func checkRequests(url string, n int) error {
	switch {
	case url == "":
		return errors.New("bench: API URL is required")
	case n < 1:
		return fmt.Errorf("bench: n must be at least 1, got %d", n)
	}
	return nil
}

// checkTarget checks where a load's notifications go and how long their
// drain may stall: a known channel, a destination on it, a positive
// timeout.
func checkTarget(channel, to string, stall time.Duration) error {
	switch {
	case stall <= 0:
		return fmt.Errorf("bench: stall timeout must be positive, got %s", stall)
	case !slices.Contains(Channels, channel):
		return fmt.Errorf("bench: channel must be one of %v, got %q", Channels, channel)
	case to == "":
		return fmt.Errorf("bench: the %s channel needs a destination (To)", channel)
	}
	return nil
}

// requestFunc returns the builder of the i-th create request of a run on
// channel to destination to, with priority when not "": each the size of a
// typical notification of its channel.
func requestFunc(channel, to, priority string) func(i int) []byte {
	quoted := strconv.Quote(to)
	return func(i int) []byte {
		b := make([]byte, 0, 320)
		b = append(b, `{"user_id":"bench-`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `","channel":"`...)
		b = append(b, channel...)
		b = append(b, `","to":`...)
		b = append(b, quoted...)
		switch channel {
		case ChannelWebhook:
			b = append(b, `,"body":`...)
			b = append(b, WebhookBody(i)...)
		case ChannelTelegram:
			b = append(b, `,"body":"herald bench `...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `: this is a notification sent by herald bench to measure the stack."`...)
		default:
			b = append(b, `,"subject":"herald bench `...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `","body":"Hello,\nthis is a notification sent by herald bench to measure the stack.\n"`...)
		}
		if priority != "" {
			b = append(b, `,"priority":"`...)
			b = append(b, priority...)
			b = append(b, '"')
		}
		return append(b, '}')
	}
}

// WebhookBody is the JSON body of the i-th webhook of a run, compact, as
// the receiver gets it: an event of the size a shop or a CI service sends.
// The raw POST ceiling posts the same bodies.
func WebhookBody(i int) []byte {
	b := make([]byte, 0, 160)
	b = append(b, `{"type":"order.shipped","bench":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `,"order":{"id":"ord_123456","items":3,"total":"42.10","currency":"EUR"},"user":"u_987"}`...)
	return b
}
