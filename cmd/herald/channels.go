package main

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/mbox"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/sender/telegram"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/worker"
)

// channelKind is one channel herald delivers on: its name, what the domain
// knows of it (request validation, the shape of its fields), and how its
// sender is built from the configuration. The API validates requests with
// the spec of every channel registered here; the worker gets one sender
// per channel.
type channelKind struct {
	name string
	// spec is what the domain knows of the channel under cfg (its
	// validation may depend on settings: the webhook's allowed ranges).
	spec func(cfg Config) (notify.ChannelSpec, error)
	// enabled reports whether cfg enables the channel: the API accepts its
	// requests and the worker builds its sender only then. Nil: always
	// (email).
	enabled func(cfg Config) bool
	// enabledBy is the setting whose value enables the channel (the one
	// enabled reads), named to a user who asks for a channel that is not
	// enabled.
	enabledBy string
	// open builds the channel's sender from cfg, and its close func.
	open func(cfg Config) (worker.Sender, func(), error)
	// check reports what open would refuse in cfg, without creating
	// anything (the email channel's mbox file): a process checks its
	// channels before it opens its database.
	check func(cfg Config) error
	// limits are the channel's own worker limits from cfg: its send
	// timeout (the lease follows the longest), rate and concurrency
	// (HERALD_<CHANNEL>_TIMEOUT, _RATE, _CONCURRENCY).
	limits func(cfg Config) worker.Channel
}

// channelKinds is the registration table: adding a channel is its package
// (an exported Validate, Config, New and Send), one line here (its spec
// names the recipient's field for its address, RecipientField: the API,
// the stores, the console and herald recipients put follow it) and its
// rows in the settings table. The recipient's field is public: the
// OpenAPI document and the Go client spell it out
// (TestRecipientFieldsDocumented).
var channelKinds = []channelKind{
	{name: notify.ChannelEmail, spec: emailSpec, open: openEmail, check: checkEmail, limits: emailLimits},
	{name: "webhook", spec: webhookSpec, enabled: webhookEnabled, enabledBy: "HERALD_WEBHOOK_SECRET", open: openWebhook, check: checkWebhookChannel, limits: webhookLimits},
	{name: "telegram", spec: telegramSpec, enabled: telegramEnabled, enabledBy: "HERALD_TELEGRAM_BOT_TOKEN", open: openTelegram, check: checkTelegramChannel, limits: telegramLimits},
}

// enabledChannels are the channels cfg enables.
func enabledChannels(cfg Config) []channelKind {
	var ks []channelKind
	for _, k := range channelKinds {
		if k.enabled == nil || k.enabled(cfg) {
			ks = append(ks, k)
		}
	}
	return ks
}

// channelSpecs are the channels the API accepts under cfg, by name: the
// enabled ones.
func channelSpecs(cfg Config) (notify.Channels, error) {
	return specsOf(cfg, enabledChannels(cfg))
}

// disabledChannels are the registered channels cfg does not enable, each
// with what enables it, for the API's refusal of a create on one.
func disabledChannels(cfg Config) map[string]string {
	out := map[string]string{}
	for _, k := range channelKinds {
		if k.enabled != nil && !k.enabled(cfg) {
			out[k.name] = fmt.Sprintf("set %s on the API and on the workers to enable it", k.enabledBy)
		}
	}
	return out
}

// knownChannelSpecs are every registered channel, enabled or not: the
// commands that read stored notifications know them all.
func knownChannelSpecs(cfg Config) (notify.Channels, error) {
	return specsOf(cfg, channelKinds)
}

// servedChannels are the channels the API and the console serve: the
// enabled ones a create may name, and every registered one a stored
// notification may carry.
func servedChannels(cfg Config) (enabled, known notify.Channels, err error) {
	if enabled, err = channelSpecs(cfg); err != nil {
		return nil, nil, err
	}
	if known, err = knownChannelSpecs(cfg); err != nil {
		return nil, nil, err
	}
	return enabled, known, nil
}

func specsOf(cfg Config, ks []channelKind) (notify.Channels, error) {
	cs := make(notify.Channels, len(ks))
	for _, k := range ks {
		spec, err := k.spec(cfg)
		if err != nil {
			return nil, usageError{err}
		}
		cs[k.name] = spec
	}
	return cs, nil
}

// longestSendTimeout is the longest send timeout of the enabled channels:
// the claim lease, one for every channel, must cover it.
func longestSendTimeout(cfg Config) time.Duration {
	var longest time.Duration
	for _, k := range enabledChannels(cfg) {
		longest = max(longest, k.limits(cfg).SendTimeout)
	}
	return longest
}

// registeredSpecs are every registered channel's spec under the zero
// configuration: what a channel's fields are (what its to is, its
// recipient field) needs no setting.
func registeredSpecs() notify.Channels {
	specs, _ := knownChannelSpecs(Config{})
	return specs
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

// emailSpec: notify.EmailSpec, whose destination is the channel's one
// provider, the mail server, keyed "email".
func emailSpec(Config) (notify.ChannelSpec, error) { return notify.EmailSpec, nil }

// webhookSpec: to is an http(s) URL, refused at create when it is a
// literal address the SSRF guard refuses (HERALD_WEBHOOK_ALLOW opens
// ranges); the body any JSON value; no subject; a recipient's address is
// its webhook_url.
func webhookSpec(cfg Config) (notify.ChannelSpec, error) {
	allow, err := webhook.ParseAllow(cfg.WebhookAllow)
	if err != nil {
		return notify.ChannelSpec{}, usageError{fmt.Errorf("HERALD_WEBHOOK_ALLOW: %w", err)}
	}
	return notify.ChannelSpec{
		Validate:       func(r notify.CreateRequest) error { return webhook.ValidateAllowing(r, allow) },
		JSONBody:       true,
		To:             "an http(s) URL",
		Destination:    webhook.DestinationKey,
		RecipientField: "webhook_url",
	}, nil
}

func webhookEnabled(cfg Config) bool { return cfg.WebhookSecret != "" }

// openWebhook builds the webhook channel's sender: signed with the first
// of HERALD_WEBHOOK_SECRET, guarded against internal destinations but
// HERALD_WEBHOOK_ALLOW, each request bounded by HERALD_WEBHOOK_TIMEOUT.
func openWebhook(cfg Config) (worker.Sender, func(), error) {
	allow, err := webhook.ParseAllow(cfg.WebhookAllow)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("HERALD_WEBHOOK_ALLOW: %w", err)}
	}
	return channelSender("webhook", webhook.New, webhook.Config{Secret: cfg.WebhookSecret, Allow: allow, Timeout: cfg.WebhookTimeout})
}

func webhookLimits(cfg Config) worker.Channel {
	ch := channelLimits(cmp.Or(cfg.WebhookTimeout, webhook.DefaultTimeout), cfg.WebhookRate, cfg.WebhookConcurrency)
	ch.Provider = "webhook endpoint"
	ch.DestinationConcurrency = cfg.WebhookDestinationConcurrency
	return ch
}

func telegramSpec(Config) (notify.ChannelSpec, error) {
	return notify.ChannelSpec{Validate: telegram.Validate, To: "a chat id or @channel", Destination: notify.ChannelDestination("telegram"),
		RecipientField: "telegram_chat_id"}, nil
}

func telegramEnabled(cfg Config) bool { return cfg.TelegramBotToken != "" }

// openTelegram builds the telegram channel's sender: sendMessage with
// HERALD_TELEGRAM_BOT_TOKEN at HERALD_TELEGRAM_API.
func openTelegram(cfg Config) (worker.Sender, func(), error) {
	return channelSender("telegram", telegram.New, telegram.Config{Token: cfg.TelegramBotToken, APIBase: cfg.TelegramAPI, Timeout: cfg.TelegramTimeout})
}

func telegramLimits(cfg Config) worker.Channel {
	ch := channelLimits(cmp.Or(cfg.TelegramTimeout, telegram.DefaultTimeout), cfg.TelegramRate, cfg.TelegramConcurrency)
	ch.Provider = "Telegram Bot API"
	return ch
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

// channelSender is a channel's open for a sender its package builds from a
// configuration: the sender and its close func, or the refusal as a usage
// error naming the channel.
func channelSender[C any, S interface {
	worker.Sender
	Close() error
}](channel string, newSender func(C) (S, error), conf C) (worker.Sender, func(), error) {
	s, err := newSender(conf)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("%s channel: %w", channel, err)}
	}
	return s, func() { _ = s.Close() }, nil
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

// checkEmail checks the email channel's sender as openEmail builds it,
// without creating its mbox file: the mail target, the SMTP server's URL
// and CA file, the From address.
func checkEmail(cfg Config) error {
	if _, err := mail.NewSender(cfg.SMTPFrom, nil); err != nil {
		return fmt.Errorf("HERALD_SMTP_FROM: %w", err)
	}
	if path, ok := mailTarget(cfg); ok {
		if path == "" {
			return errors.New("HERALD_SMTP_URL=mbox: needs a file: mbox:PATH")
		}
		return nil
	}
	s, err := smtp.New(smtp.Config{URL: cfg.SMTPURL, From: cfg.SMTPFrom, CAFile: cfg.SMTPCAFile, Timeout: cfg.SMTPTimeout})
	if err != nil {
		return fmt.Errorf("HERALD_SMTP_URL, HERALD_SMTP_CA_FILE: %w", err)
	}
	return s.Close()
}

// checkWebhookChannel checks the webhook channel's sender as openWebhook
// builds it.
func checkWebhookChannel(cfg Config) error {
	_, closeSender, err := openWebhook(cfg)
	if err != nil {
		return err
	}
	closeSender()
	return nil
}

// checkTelegramChannel checks the telegram channel's sender as
// openTelegram builds it.
func checkTelegramChannel(cfg Config) error {
	s, err := telegram.New(telegram.Config{Token: cfg.TelegramBotToken, APIBase: cfg.TelegramAPI, Timeout: cfg.TelegramTimeout})
	if err != nil {
		return fmt.Errorf("HERALD_TELEGRAM_BOT_TOKEN, HERALD_TELEGRAM_API: %w", err)
	}
	return s.Close()
}
