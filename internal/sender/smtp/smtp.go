// Package smtp delivers emails to an SMTP server (HERALD_SMTP_URL).
//
// A session that completed a mail transaction is kept open and reused by the
// next Send (a worker sends many emails to one server: the dial, greeting,
// EHLO and AUTH were most of each Send's round trips). A session that failed
// in any way is closed, never reused, so no broken state carries over.
package smtp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
)

// Config configures a Sender.
type Config struct {
	// URL is smtp://[user:pass@]host[:port] (port 25 by default), or
	// smtps://... for implicit TLS (port 465 by default). With user:pass the
	// sender authenticates with AUTH PLAIN. Required.
	URL string
	// From is the envelope sender (MAIL FROM), a single address. Default:
	// each email's own From address.
	From string
	// Timeout bounds one whole Send: dial, every command and the data. A
	// Send is always bounded, so zero means the default, 30s; it must not
	// be negative.
	Timeout time.Duration
	// HelloName is the name given in EHLO/HELO. Default "localhost".
	HelloName string
	// TLSConfig is used for smtps://. Default: the system roots, verifying
	// the URL's host name.
	TLSConfig *tls.Config
	// MaxIdle is the number of open sessions kept for reuse; size it to the
	// worker's prefetch (herald passes HERALD_PREFETCH). Zero is honoured:
	// no session is kept and every Send opens a fresh one. It must not be
	// negative.
	MaxIdle int
	// IdleTimeout closes a kept session unused for this long, before the
	// server's own idle timeout (RFC 5321 asks servers for at least 5
	// minutes) drops it. Zero means the default, 30s (MaxIdle 0 is the way
	// to keep no session); it must not be negative.
	IdleTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.HelloName == "" {
		c.HelloName = "localhost"
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Timeout < 0:
		return errors.New("timeout must not be negative")
	case c.MaxIdle < 0:
		return errors.New("max idle sessions must not be negative")
	case c.IdleTimeout < 0:
		return errors.New("idle timeout must not be negative")
	}
	for _, r := range c.HelloName {
		if r <= ' ' || r == 0x7f {
			return errors.New("hello name must not contain spaces or control characters")
		}
	}
	if c.From != "" {
		if _, err := notify.ParseAddress(c.From); err != nil {
			return fmt.Errorf("from %q: %w", c.From, err)
		}
	}
	return nil
}

// Sender sends emails over SMTP. It is safe for concurrent use.
type Sender struct {
	cfg      Config
	addr     string // host:port
	host     string
	implicit bool // smtps://
	user     string
	pass     string
	from     string // bare envelope sender, "" for each email's own

	idle chan *session // sessions kept for reuse
}

// session is one open SMTP session, greeted and authenticated.
type session struct {
	conn      net.Conn
	c         *gosmtp.Client
	idleSince time.Time
}

// New checks cfg and returns a Sender. It does not touch the network.
func New(cfg Config) (*Sender, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("smtp config: %w", err)
	}
	s := &Sender{cfg: cfg, idle: make(chan *session, cfg.MaxIdle)}
	if err := s.parseURL(cfg.URL); err != nil {
		return nil, fmt.Errorf("smtp config: %w", err)
	}
	if cfg.From != "" {
		// validate has parsed it already.
		s.from, _ = notify.ParseAddress(cfg.From)
	}
	return s, nil
}

// parseURL reads the server address and credentials. Its errors never quote
// the URL: it may hold a password.
func (s *Sender) parseURL(raw string) error {
	if raw == "" {
		return errors.New("URL is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			// The inner error names the bad part, not the whole URL.
			return fmt.Errorf("invalid URL: %w", uerr.Err)
		}
		return errors.New("invalid URL")
	}
	port := ""
	switch u.Scheme {
	case "smtp":
		port = "25"
	case "smtps":
		port = "465"
		s.implicit = true
	default:
		return fmt.Errorf("URL scheme %q: want smtp or smtps", u.Scheme)
	}
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("URL must be scheme://[user:pass@]host[:port] with no path or query")
	}
	s.host = u.Hostname()
	if s.host == "" {
		return errors.New("URL has no host")
	}
	if p := u.Port(); p != "" {
		port = p
	}
	s.addr = net.JoinHostPort(s.host, port)
	if u.User != nil {
		s.user = u.User.Username()
		s.pass, _ = u.User.Password()
		if s.user == "" {
			return errors.New("URL has credentials without a user name")
		}
	}
	return nil
}

// Send delivers e. An error wrapping notify.Permanent means the server
// refused for good (a 5xx reply) or the email can never be sent; any other
// error (a 4xx reply, a failed dial, a timeout) may pass on a retry. A nil
// return means the server accepted the message.
func (s *Sender) Send(ctx context.Context, e notify.Email) error {
	if err := s.send(ctx, e); err != nil {
		return fmt.Errorf("smtp send: %w", err)
	}
	return nil
}

func (s *Sender) send(ctx context.Context, e notify.Email) error {
	to, err := notify.ParseAddress(e.To)
	if err != nil {
		return notify.Permanent(fmt.Errorf("recipient: %w", err))
	}
	from := s.from
	if from == "" {
		if from, err = notify.ParseAddress(e.From); err != nil {
			return notify.Permanent(fmt.Errorf("sender: %w", err))
		}
	}
	data := mail.Render(e, time.Now())

	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	for {
		ses, reused, err := s.session(ctx)
		if err != nil {
			return s.classify(ctx, err)
		}
		// go-smtp's client sets its own deadline per command; closing the
		// connection is what makes ctx (and the overall timeout) interrupt
		// it.
		stop := context.AfterFunc(ctx, func() { _ = ses.conn.Close() })
		step, err := transact(ses.c, from, to, data)
		interrupted := !stop()
		if err == nil {
			if interrupted {
				_ = ses.conn.Close()
			} else {
				s.keep(ses)
			}
			return nil
		}
		_ = ses.conn.Close()
		// A kept session the server dropped while it was idle fails at its
		// first command, before any mail was handed over: try once more
		// on a fresh session.
		if reused && step == "mail from" && ctx.Err() == nil && dropped(err) {
			continue
		}
		return s.classify(ctx, fmt.Errorf("%s: %w", step, err))
	}
}

// classify marks a 5xx reply permanent and reports a timeout or
// cancellation as such rather than as the closed connection it caused.
func (s *Sender) classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	var serr *gosmtp.SMTPError
	if errors.As(err, &serr) && serr.Code >= 500 && serr.Code <= 599 {
		return notify.Permanent(err)
	}
	return err
}

// dropped reports whether err says the server closed the session: a network
// error, or 421 "service not available, closing channel".
func dropped(err error) bool {
	var serr *gosmtp.SMTPError
	if errors.As(err, &serr) {
		return serr.Code == 421
	}
	return true
}

// session returns a kept session, or opens a new one.
func (s *Sender) session(ctx context.Context) (*session, bool, error) {
	for {
		select {
		case ses := <-s.idle:
			if time.Since(ses.idleSince) < s.cfg.IdleTimeout {
				return ses, true, nil
			}
			_ = ses.conn.Close()
			continue
		default:
		}
		ses, err := s.open(ctx)
		return ses, false, err
	}
}

// open dials, greets and authenticates a new session.
func (s *Sender) open(ctx context.Context) (*session, error) {
	conn, err := s.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", s.addr, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	c := gosmtp.NewClient(conn)
	// ctx carries the deadline that counts; the client's own per-command
	// deadlines only back it up, later, so that a timeout reports as one.
	c.CommandTimeout = s.cfg.Timeout + time.Second
	c.SubmissionTimeout = s.cfg.Timeout + time.Second
	if err := c.Hello(s.cfg.HelloName); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	if s.user != "" {
		// PLAIN names the user but the error must not carry the password;
		// go-sasl and the server reply never echo it.
		if err := c.Auth(sasl.NewPlainClient("", s.user, s.pass)); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("auth as %q: %w", s.user, err)
		}
	}
	return &session{conn: conn, c: c}, nil
}

// keep puts a session that just completed a transaction back for reuse, or
// ends it politely when enough are kept.
func (s *Sender) keep(ses *session) {
	ses.idleSince = time.Now()
	select {
	case s.idle <- ses:
	default:
		_ = ses.c.Quit()
		_ = ses.conn.Close()
	}
}

// Close ends the kept sessions. Sends after Close open fresh sessions.
func (s *Sender) Close() error {
	for {
		select {
		case ses := <-s.idle:
			_ = ses.c.Quit()
			_ = ses.conn.Close()
		default:
			return nil
		}
	}
}

func (s *Sender) dial(ctx context.Context) (net.Conn, error) {
	if !s.implicit {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", s.addr)
	}
	cfg := s.cfg.TLSConfig.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = s.host
	}
	d := tls.Dialer{Config: cfg}
	return d.DialContext(ctx, "tcp", s.addr)
}

// transact runs one mail transaction on a greeted session and names the
// step that failed.
func transact(c *gosmtp.Client, from, to string, data []byte) (string, error) {
	if err := c.Mail(from, nil); err != nil {
		return "mail from", err
	}
	if err := c.Rcpt(to, nil); err != nil {
		return "rcpt to", err
	}
	w, err := c.Data()
	if err != nil {
		return "data", err
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return "write data", err
	}
	if err := w.Close(); err != nil {
		return "end data", err
	}
	return "", nil
}
