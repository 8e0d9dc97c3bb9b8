package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/sender/webhook"
)

// This file checks a process's configuration before it opens anything:
// a setting that cannot work is a usage error (exit 2) naming it, and
// leaves nothing behind, no SQLite file, no mbox, no broker name. The
// settings table checks each value on its own as it is parsed (the check
// of its row); checkProcess checks what depends on several settings, or
// on the roles of the process, with the same constructors the process
// will use, none of which touches the disk or the network.

// checkListenAddr vets a listen address (HERALD_HTTP_ADDR,
// HERALD_METRICS_ADDR): host:port, the host empty (every interface), an IP
// address or a name, the port a number.
func checkListenAddr(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("want host:port like 127.0.0.1:8080 or :8080, got %q", v)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("want a port number from 0 to 65535, got %q in %q", port, v)
	}
	// Four numbers that are no IPv4 address (999.0.0.1) would be looked
	// up as a name, and fail only at listen.
	if host != "" && strings.Trim(host, "0123456789.") == "" && net.ParseIP(host) == nil {
		return fmt.Errorf("%q is not an IP address", host)
	}
	return nil
}

// checkMetricsAddr is checkListenAddr for a setting that may be unset.
func checkMetricsAddr(v string) error {
	if v == "" {
		return nil
	}
	return checkListenAddr(v)
}

// checkWebhookSecret vets HERALD_WEBHOOK_SECRET as the webhook channel
// reads it (unset: the channel is off).
func checkWebhookSecret(v string) error {
	if v == "" {
		return nil
	}
	s, err := webhook.New(webhook.Config{Secret: v})
	if err != nil {
		return err
	}
	return s.Close()
}

// checkWebhookAllow vets HERALD_WEBHOOK_ALLOW: CIDR prefixes or addresses.
func checkWebhookAllow(v string) error {
	_, err := webhook.ParseAllow(v)
	return err
}

// checkCORSOrigins vets HERALD_CORS_ORIGINS as the API takes it.
func checkCORSOrigins(v string) error {
	return api.CheckCORSOrigins(commaList(v))
}

// checkSMTPURL vets HERALD_SMTP_URL's form: unset, mbox:PATH, or a URL
// the SMTP sender takes (the CA file and the From address are checked
// with the sender, by checkProcess).
func checkSMTPURL(v string) error {
	if v == "" {
		return nil
	}
	if path, ok := strings.CutPrefix(v, mboxScheme); ok {
		if path == "" {
			return errors.New("mbox: needs a file: mbox:PATH")
		}
		return nil
	}
	s, err := smtp.New(smtp.Config{URL: v})
	if err != nil {
		return err
	}
	return s.Close()
}

// checkAddress vets an email address setting (HERALD_SMTP_FROM).
func checkAddress(v string) error {
	_, err := notify.ParseAddress(v)
	return err
}

// checkHTTPURL vets a base URL herald calls (HERALD_TELEGRAM_API): http or
// https, a host, no credentials.
func checkHTTPURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errors.New("want an http(s) URL with a host and no credentials")
	}
	return nil
}

// checkProcess checks, before a process of roles opens anything, what
// its parts would refuse only once built: the settings that go together,
// each enabled channel's sender as the worker builds it, the status
// webhook, the API's channel validation. Every error is a usageError
// naming the setting.
func checkProcess(cfg Config, roles []role) error {
	var errs []error
	if (cfg.TelegramToken == "") != (cfg.TelegramChatID == "") && hasRole(roles, roleAPI) {
		errs = append(errs, errors.New("HERALD_TELEGRAM_TOKEN and HERALD_TELEGRAM_CHAT_ID go together: set both to send alerts to Telegram, or neither"))
	}
	if hasRole(roles, roleRelay) || hasRole(roles, roleWorker) {
		if _, err := writeStatusEvents(cfg); err != nil {
			errs = append(errs, err)
		}
		// The status webhook's relay runs with the relay, or with the
		// workers on the outbox table.
		if cfg.StatusWebhookURL != "" && (hasRole(roles, roleRelay) || cfg.BrokerURL == "") {
			errs = append(errs, checkStatusWebhook(cfg))
		}
	}
	if hasRole(roles, roleAPI) {
		if _, err := channelSpecs(cfg); err != nil {
			errs = append(errs, err)
		}
		if _, err := allowedHosts(cfg); err != nil {
			errs = append(errs, err)
		}
	}
	if hasRole(roles, roleWorker) {
		for _, k := range enabledChannels(cfg) {
			if err := k.check(cfg); err != nil {
				errs = append(errs, err)
			}
		}
		if _, err := crashHook(cfg.DebugCrash, slog.New(slog.DiscardHandler)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

// checkStatusWebhook checks HERALD_STATUS_WEBHOOK_URL with the secret
// that signs its events, as newStatusRelay builds its publisher.
func checkStatusWebhook(cfg Config) error {
	if cfg.WebhookSecret == "" {
		return errors.New("HERALD_STATUS_WEBHOOK_URL needs HERALD_WEBHOOK_SECRET, which signs the status events")
	}
	p, err := webhook.NewStatusPublisher(webhook.StatusConfig{URL: cfg.StatusWebhookURL, Secret: cfg.WebhookSecret, Timeout: cfg.WebhookTimeout})
	if err != nil {
		return fmt.Errorf("HERALD_STATUS_WEBHOOK_URL: %w", err)
	}
	return p.Close()
}

// checkCategories vets HERALD_REQUIRED_CATEGORIES: category names.
func checkCategories(v string) error {
	for _, c := range commaList(v) {
		if !notify.ValidCategory(c) {
			return fmt.Errorf("%q is not a category name: 1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit", c)
		}
	}
	return nil
}

// minLinkSecret is the shortest HERALD_LINK_SECRET taken: a key an
// attacker could guess would let them opt anyone out of anything.
const minLinkSecret = 32

// checkLinkSecret vets HERALD_LINK_SECRET's length; its text is never
// echoed.
func checkLinkSecret(v string) error {
	if v != "" && len(v) < minLinkSecret {
		return fmt.Errorf("must be at least %d characters (it has %d)", minLinkSecret, len(v))
	}
	return nil
}

// checkPublicURL vets HERALD_PUBLIC_URL: an absolute http(s) URL with a
// host and no query or fragment.
func checkPublicURL(v string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New("must be an absolute https:// (or http://) URL with a host and no query, fragment or user: https://herald.example.com")
	}
	return nil
}
