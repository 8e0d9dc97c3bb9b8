// Package telegram is the Telegram channel: it sends a notification's
// body as a message to a chat through the Bot API's sendMessage, with the
// channel's own bot (HERALD_TELEGRAM_BOT_TOKEN; the alert's bot is another
// setting).
//
// A Send's error says whose fault a failure was. The Bot API is one
// provider with one limit for the whole channel, so no failure is scoped
// to a destination. ok:true is sent; a 429 is notify.Throttled for its
// parameters.retry_after; 401 and 404 (a bad token: the API refuses us,
// not the message), a redirect, and a failure before the request was
// handed over are notify.SenderDown: a refused connection, DNS, TLS, and a
// connect or TLS handshake that had not completed, or a request not yet
// written, when the deadline passed, whichever deadline fired first (the
// caller's or Config.Timeout), as a black-holed API does. 403 (the bot
// blocked or kicked), 400 ("chat not found", a malformed message) and
// other 4xx are notify.Permanent; 408, 5xx, no reply in time, or a
// connection the API drops once it is made, are this message's attempt.
// A caller that cancels gets a plain error.
//
// The Bot API has no idempotency key: a send repeated after a crash
// between the send and its record is a second message.
//
// The token is part of every request's path: it never appears in an
// error or a log record.
package telegram

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/handover"
)

// Defaults of a Config that leaves a field zero.
const (
	DefaultAPI     = "https://api.telegram.org"
	DefaultTimeout = 10 * time.Second
)

const (
	// maxReply is how much of a reply is read.
	maxReply = 64 << 10
	// maxReason is how much of a description an error quotes.
	maxReason = 200
)

// Config configures a Sender.
type Config struct {
	// Token is the bot's token (HERALD_TELEGRAM_BOT_TOKEN). Required.
	Token string
	// APIBase is the Bot API base URL (HERALD_TELEGRAM_API); tests point
	// it at a local server. Default DefaultAPI.
	APIBase string
	// Timeout bounds one Send or Probe: connect, TLS, request and reply.
	// A Send is always bounded, so zero means DefaultTimeout (10s); it
	// must not be negative.
	Timeout time.Duration
}

func (c Config) withDefaults() Config {
	c.APIBase = cmp.Or(c.APIBase, DefaultAPI)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Token == "":
		return errors.New("telegram bot token is required")
	case strings.ContainsFunc(c.Token, func(r rune) bool { return r <= ' ' || r == '/' || r == '?' || r == '#' || r == '%' || r >= 0x7f }):
		return errors.New("telegram bot token holds characters a token never has")
	case c.Timeout < 0:
		return errors.New("telegram timeout must not be negative")
	}
	u, err := url.Parse(c.APIBase)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("telegram api %q is not an http(s) URL without credentials", c.APIBase)
	}
	return nil
}

// Sender sends Telegram messages. It is safe for concurrent use.
type Sender struct {
	cfg    Config
	base   string // APIBase + "/bot" + Token + "/"
	client *http.Client
}

// New checks cfg and returns a Sender. It does not touch the network.
func New(cfg Config) (*Sender, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
	return &Sender{
		cfg:  cfg,
		base: strings.TrimRight(cfg.APIBase, "/") + "/bot" + cfg.Token + "/",
		client: &http.Client{
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         dialer.DialContext,
				TLSHandshakeTimeout: cfg.Timeout,
				ForceAttemptHTTP2:   true,
				MaxIdleConnsPerHost: 32,
				IdleConnTimeout:     90 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// Timeout is the longest one Send takes: whoever holds a claim across a
// Send must hold it longer.
func (s *Sender) Timeout() time.Duration { return s.cfg.Timeout }

// Close closes the kept connections.
func (s *Sender) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// reply is the Bot API's answer to every method.
type reply struct {
	OK          bool   `json:"ok"`
	ErrorCode   int    `json:"error_code"`
	Description string `json:"description"`
	Parameters  struct {
		RetryAfter      int   `json:"retry_after"`
		MigrateToChatID int64 `json:"migrate_to_chat_id"`
	} `json:"parameters"`
}

// Send sends m.Body to the chat m.To. A nil return means the Bot API
// answered ok:true. Otherwise the error is marked as the package doc says.
func (s *Sender) Send(ctx context.Context, m notify.Outgoing) error {
	chat, err := chatID(m.To)
	if err != nil {
		return notify.Permanent(fmt.Errorf("telegram sendMessage: %w", err))
	}
	text, err := json.Marshal(m.Body)
	if err != nil {
		return notify.Permanent(fmt.Errorf("telegram sendMessage: encode text: %w", err))
	}
	body := []byte(`{"chat_id":` + chat + `,"text":` + string(text) + `}`)
	r, status, err := s.call(ctx, "sendMessage", body)
	if err != nil {
		return err
	}
	fail := fmt.Errorf("telegram sendMessage to %s: status %d%s", m.To, status, s.describe(r))
	switch {
	case status/100 == 2 && r.OK:
		return nil
	case status == http.StatusTooManyRequests:
		return notify.Throttled(fail, time.Duration(r.Parameters.RetryAfter)*time.Second)
	case status == http.StatusUnauthorized, status == http.StatusNotFound, status/100 == 3:
		return notify.SenderDown(fail)
	case status == http.StatusRequestTimeout, status/100 == 5:
		return fail
	case status == http.StatusBadRequest && r.Parameters.MigrateToChatID != 0:
		return notify.Permanent(fmt.Errorf("%w (the group is now chat %d)", fail, r.Parameters.MigrateToChatID))
	case status/100 == 4:
		return notify.Permanent(fail)
	}
	// A 2xx without ok:true, or a status the API never gives.
	return fmt.Errorf("telegram sendMessage to %s: unexpected reply: status %d%s", m.To, status, s.describe(r))
}

// Probe asks the Bot API who the bot is (getMe): nil when it answers
// ok:true, a notify.SenderDown error otherwise. The worker probes while
// the channel is down, to know when to resume.
func (s *Sender) Probe(ctx context.Context) error {
	r, status, err := s.call(ctx, "getMe", []byte("{}"))
	switch {
	case err != nil:
		if !notify.IsSenderDown(err) {
			err = notify.SenderDown(err)
		}
		return err
	case status/100 != 2 || !r.OK:
		return notify.SenderDown(fmt.Errorf("telegram getMe: status %d%s", status, s.describe(r)))
	}
	return nil
}

// call posts body to method and returns the decoded reply and its status.
// Its error, when the call failed before a reply, is classified already:
// before the hand-over (see the package doc), the provider is down;
// after, the message's attempt; when the caller cancelled, plain.
func (s *Sender) call(ctx context.Context, method string, body []byte) (reply, int, error) {
	var r reply
	fail := func(format string, args ...any) error {
		return fmt.Errorf("telegram %s: %s", method, s.redact(fmt.Sprintf(format, args...)))
	}
	if err := ctx.Err(); err != nil {
		return r, 0, fmt.Errorf("telegram %s: before sending: %w", method, err)
	}
	var tr handover.Trace
	tctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	tctx = tr.Context(tctx)
	req, err := http.NewRequestWithContext(tctx, http.MethodPost, s.base+method, bytes.NewReader(body))
	if err != nil {
		return r, 0, notify.SenderDown(fail("build request: %v", err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message quotes the URL, token included
		}
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			// The caller gave up: that says nothing about the API.
			return r, 0, fmt.Errorf("telegram %s: the caller gave up: %w (%s)", method, ctx.Err(), s.redact(err.Error()))
		case tr.Stalled(tctx, err):
			// A deadline passed before the API took the request (the
			// caller's, this timeout, or the dialer's or TLS
			// handshake's): the provider is down, not the message.
			// One text whichever deadline fired (the chain keeps the
			// context's error and not the request's, whose URL holds the
			// token), so that the gate's reason does not flip between them.
			cause := error(errDeadline)
			if tctx.Err() != nil {
				cause = tctx.Err()
			}
			return r, 0, notify.SenderDown(fmt.Errorf("telegram %s: %s before the request was handed over: %w",
				method, tr.Unfinished(), notify.Quiet("deadline exceeded", cause)))
		case !tr.Connected():
			return r, 0, notify.SenderDown(fail("cannot connect: %v", err))
		case tctx.Err() != nil:
			return r, 0, fmt.Errorf("telegram %s: no reply within the deadline (the caller's or the %s timeout), the request sent: %w (%s)",
				method, s.cfg.Timeout, tctx.Err(), s.redact(err.Error()))
		default:
			return r, 0, fail("connection failed during the request (request sent: %t): %v", tr.Wrote(), err)
		}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil && resp.StatusCode/100 == 2 {
		return r, 0, fail("read the reply: %v", err)
	}
	if json.Unmarshal(raw, &r) != nil {
		r = reply{Description: string(raw)}
	}
	if resp.StatusCode == http.StatusTooManyRequests && r.Parameters.RetryAfter == 0 {
		if n, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && n > 0 {
			r.Parameters.RetryAfter = n
		}
	}
	return r, resp.StatusCode, nil
}

// errDeadline stands for a dialer's or TLS handshake's own timeout in the
// chain of a send that no deadline of the context cut.
var errDeadline = errors.New("dial or TLS handshake timeout")

// describe renders a reply's description for an error: ": <text>".
func (s *Sender) describe(r reply) string {
	d := strings.TrimSpace(strings.Map(func(c rune) rune {
		if c == unicode.ReplacementChar || unicode.IsControl(c) {
			return ' '
		}
		return c
	}, strings.ToValidUTF8(r.Description, " ")))
	if len(d) > maxReason {
		d = strings.ToValidUTF8(d[:maxReason], "") + "..."
	}
	if d == "" {
		return ""
	}
	return ": " + s.redact(d)
}

// redact removes the token from s.
func (s *Sender) redact(v string) string {
	return strings.ReplaceAll(v, s.cfg.Token, "REDACTED")
}
