package main

import (
	"errors"
	"slices"
	"time"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/mbox"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/worker"
)

// channelKind is one channel herald delivers on: its name, what the domain
// knows of it (request validation, the shape of its fields), and how its
// sender is built from the configuration. The API validates requests with
// the spec of every channel registered here; the worker gets one sender
// per channel.
type channelKind struct {
	name string
	spec notify.ChannelSpec
	// open builds the channel's sender from cfg, and its close func.
	open func(cfg Config) (worker.Sender, func(), error)
	// limits are the channel's own worker limits from cfg: its send
	// timeout (the lease follows the longest), rate and concurrency
	// (HERALD_<CHANNEL>_TIMEOUT, _RATE, _CONCURRENCY).
	limits func(cfg Config) worker.Channel
}

// channelKinds is the registration table: adding a channel is its package
// (an exported Validate, Config, New and Send) plus one line here and its
// rows in the settings table, e.g.
//
//	{name: "webhook", spec: notify.ChannelSpec{Validate: webhook.Validate, JSONBody: true, To: "an http(s) URL"}, open: openWebhook,
//		limits: func(c Config) worker.Channel { return channelLimits(c.WebhookTimeout, c.WebhookRate, c.WebhookConcurrency) }},
//
// where openWebhook builds webhook.New(webhook.Config{...}) from its
// settings.
var channelKinds = []channelKind{
	{name: notify.ChannelEmail, spec: notify.EmailSpec, open: openEmail, limits: emailLimits},
}

// channelSpecs are the channels the API accepts, by name.
func channelSpecs() notify.Channels {
	cs := make(notify.Channels, len(channelKinds))
	for _, k := range channelKinds {
		cs[k.name] = k.spec
	}
	return cs
}

// longestSendTimeout is the longest send timeout of the channels: the
// claim lease, one for every channel, must cover it.
func longestSendTimeout(cfg Config) time.Duration {
	var longest time.Duration
	for _, k := range channelKinds {
		longest = max(longest, k.limits(cfg).SendTimeout)
	}
	return longest
}

// channelNames lists the registered channels, sorted.
func channelNames() []string {
	var names []string
	for _, k := range channelKinds {
		names = append(names, k.name)
	}
	slices.Sort(names)
	return names
}

// openEmail builds the email channel's sender: the email of each
// notification, From HERALD_SMTP_FROM, through the mbox file or the SMTP
// server HERALD_SMTP_URL names.
func openEmail(cfg Config) (worker.Sender, func(), error) {
	next, closeNext, err := newSender(cfg)
	if err != nil {
		return nil, nil, err
	}
	s, err := mail.NewSender(cfg.SMTPFrom, next)
	if err != nil {
		closeNext()
		return nil, nil, usageError{err}
	}
	return s, closeNext, nil
}

// emailLimits are the email channel's limits: HERALD_SMTP_TIMEOUT bounds
// each send (the SMTP sender's own timeout), HERALD_SMTP_RATE is its rate
// (the email channel's HERALD_<CHANNEL>_RATE, under the name it always
// had) and HERALD_EMAIL_CONCURRENCY its concurrency.
func emailLimits(cfg Config) worker.Channel {
	timeout := cfg.SMTPTimeout
	if timeout <= 0 {
		timeout = smtp.DefaultTimeout // what the sender and the worker take for zero
	}
	ch := channelLimits(timeout, cfg.SMTPRate, cfg.EmailConcurrency)
	ch.Provider = "mail server"
	return ch
}

// defaultChannelTimeout is a channel's send timeout when its setting is
// zero, as the worker takes it; set here so that the lease, derived from
// the longest timeout, covers it.
const defaultChannelTimeout = 30 * time.Second

// channelLimits are a channel's limits from its settings
// HERALD_<CHANNEL>_TIMEOUT (zero: 30s), _RATE (sends per second, 0: none)
// and _CONCURRENCY (0: none but HERALD_PREFETCH).
func channelLimits(timeout time.Duration, rate, concurrency int) worker.Channel {
	if timeout <= 0 {
		timeout = defaultChannelTimeout
	}
	return worker.Channel{SendTimeout: timeout, Rate: float64(rate), Concurrency: concurrency}
}

// newSender builds the email sender HERALD_SMTP_URL names (an mbox file
// for mbox:PATH, and herald.mbox when it is unset, which only serve allows)
// and its close func. The SMTP sender keeps one session per delivery in
// flight (HERALD_PREFETCH), open and reused, and no more; its Timeout
// (smtp.DefaultTimeout) bounds each send, so a claim held across a send
// must last longer than that.
func newSender(cfg Config) (mail.EmailSender, func(), error) {
	if path, ok := mailTarget(cfg); ok {
		if path == "" {
			return nil, nil, usageError{errors.New("HERALD_SMTP_URL=mbox: needs a file: mbox:PATH")}
		}
		s, err := mbox.New(path)
		if err != nil {
			return nil, nil, err
		}
		return s, func() {}, nil
	}
	s, err := smtp.New(smtp.Config{
		URL:         cfg.SMTPURL,
		From:        cfg.SMTPFrom,
		CAFile:      cfg.SMTPCAFile,
		MaxSessions: cfg.Prefetch,
		MaxIdle:     cfg.Prefetch,
		Timeout:     cfg.SMTPTimeout,
	})
	if err != nil {
		return nil, nil, err
	}
	return s, func() { _ = s.Close() }, nil
}
