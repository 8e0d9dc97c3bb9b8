//go:build !nobench

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/bench"
	"github.com/heraldhq/herald/internal/bench/provider"
	"github.com/heraldhq/herald/internal/bench/raw"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// benchTarget is the provider a bench's notifications go to, in process:
// an SMTP sink for email, a webhook receiver, a Bot API receiver. It is
// started before the raw ceilings, which measure it bare, and stopped at
// the end.
type benchTarget struct {
	channel string
	// to is every create's destination.
	to string
	// latency is the provider's answer time, as the report shows it.
	latency time.Duration
	// configure points the scratch configuration at the provider and
	// enables its channel.
	configure func(cfg *Config)
	// sink, when set, counts what the provider received by notification
	// (bench.Config.Sink).
	sink func() map[string]int
	// rawURL, when set, is where the raw POST ceiling posts; body is the
	// i-th create's body as the provider receives it.
	rawURL string
	body   func(i int) []byte
	// reset, when set, forgets what the provider received (after the
	// warm-up).
	reset func()
	// check, when set, runs after the run: what the provider saw that the
	// sink's count does not tell (bad signatures, missing Bot API
	// messages).
	check func(res bench.Result) error
	// notes explain the figures of the channel.
	notes []string
	close func()
}

// withQuietMail points the email channel, which is always enabled, at an
// SMTP sink of its own for a bench of another channel: without it the
// builder would open herald.mbox in the working directory, or the user's
// HERALD_SMTP_URL. The sink receives nothing.
func withQuietMail(t *benchTarget) (*benchTarget, error) {
	sink, err := smtptest.New()
	if err != nil {
		t.close()
		return nil, fmt.Errorf("herald bench: start the SMTP sink: %w", err)
	}
	configure, closeTarget := t.configure, t.close
	t.configure = func(cfg *Config) {
		cfg.SMTPURL = sink.URL()
		configure(cfg)
	}
	t.close = func() {
		closeTarget()
		sink.Close()
	}
	return t, nil
}

// benchTargets is bench's table of channels, by name.
var benchTargets = map[string]func(o benchOptions) (*benchTarget, error){
	bench.ChannelEmail:    emailTarget,
	bench.ChannelWebhook:  webhookTarget,
	bench.ChannelTelegram: telegramTarget,
}

func emailTarget(o benchOptions) (*benchTarget, error) {
	sink, err := smtptest.New(smtptest.WithDataLatency(o.smtpLatency))
	if err != nil {
		return nil, fmt.Errorf("herald bench: start the SMTP sink: %w", err)
	}
	return &benchTarget{
		channel:   bench.ChannelEmail,
		latency:   o.smtpLatency,
		configure: func(cfg *Config) { cfg.SMTPURL = sink.URL() },
		sink:      sink.CountByMessageID,
		close:     sink.Close,
	}, nil
}

// webhookTarget is a receiver on loopback that checks each webhook's
// signature under a secret made for the run; the scratch configuration
// signs with that secret and opens 127.0.0.1 to the SSRF guard.
func webhookTarget(o benchOptions) (*benchTarget, error) {
	secret := provider.NewWebhookSecret()
	rcv, err := provider.New(provider.Config{Latency: o.recvLatency, Secret: secret})
	if err != nil {
		return nil, fmt.Errorf("herald bench: start the webhook receiver: %w", err)
	}
	return withQuietMail(&benchTarget{
		channel: bench.ChannelWebhook,
		to:      rcv.WebhookURL(),
		latency: o.recvLatency,
		configure: func(cfg *Config) {
			cfg.WebhookSecret, cfg.WebhookAllow = secret, "127.0.0.1/32"
		},
		sink:   rcv.Received,
		rawURL: rcv.RawURL(),
		body:   bench.WebhookBody,
		check:  func(bench.Result) error { return rcv.Check() },
		notes: []string{"webhook: every delivery's Standard Webhooks signature was checked by the receiver (its own HMAC code, a secret made for the run); " +
			"HERALD_WEBHOOK_ALLOW=127.0.0.1/32 opens the loopback receiver to the SSRF guard"},
		close: func() { _ = rcv.Close() },
	})
}

// telegramTarget is a receiver on loopback that speaks the Bot API's
// getMe and sendMessage for a token made for the run.
func telegramTarget(o benchOptions) (*benchTarget, error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := "100000:bench" + hex.EncodeToString(b)
	rcv, err := provider.New(provider.Config{Latency: o.recvLatency, BotToken: token})
	if err != nil {
		return nil, fmt.Errorf("herald bench: start the Bot API receiver: %w", err)
	}
	return withQuietMail(&benchTarget{
		channel: bench.ChannelTelegram,
		to:      "4242",
		latency: o.recvLatency,
		configure: func(cfg *Config) {
			cfg.TelegramBotToken, cfg.TelegramAPI = token, rcv.BotAPI()
		},
		rawURL: rcv.RawURL(),
		body: func(i int) []byte {
			return fmt.Appendf(nil, `{"chat_id":4242,"text":"herald bench %d: this is a notification sent by herald bench to measure the stack."}`, i)
		},
		reset: rcv.Reset,
		check: func(res bench.Result) error {
			// The Bot API has no id of herald's: each create's text is
			// its own, so distinct texts count the notifications.
			total, distinct := rcv.Messages()
			if distinct < res.Accepted {
				return fmt.Errorf("herald bench: the Bot API receiver got %d distinct messages (%d in all) for %d accepted notifications", distinct, total, res.Accepted)
			}
			return nil
		},
		notes: []string{"telegram: the Bot API receiver has no notification id to count by, so it checks that it got as many distinct texts (one per create) as creates were accepted; the raw POST ceiling posts the same sendMessage bodies to the receiver's plain endpoint"},
		close: func() { _ = rcv.Close() },
	})
}

// sendConcurrency is the most sends of the channel a bench's one worker
// has under way at once: HERALD_<CHANNEL>_CONCURRENCY when set and below
// HERALD_PREFETCH, the prefetch otherwise.
func sendConcurrency(cfg Config, channel string) int {
	n := cfg.Prefetch
	for _, k := range channelKinds {
		if k.name == channel {
			if c := k.limits(cfg).Concurrency; c > 0 && c < n {
				n = c
			}
		}
	}
	return max(n, 1)
}

// rawPOST measures the target's raw POST ceiling: n POSTs of the run's
// bodies at the worker's send concurrency.
func (t *benchTarget) rawPOST(ctx context.Context, cfg Config, n int) (float64, int, error) {
	clients := sendConcurrency(cfg, t.channel)
	rate, err := raw.POST(ctx, raw.POSTOptions{URL: t.rawURL, N: n, Clients: clients, Body: t.body})
	return rate, clients, err
}
