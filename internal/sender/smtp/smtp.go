// Package smtp delivers emails to an SMTP server (HERALD_SMTP_URL).
//
// TLS: smtp:// upgrades the session with STARTTLS (?tls=required, the
// default whenever the URL holds credentials, or ?tls=opportunistic, the
// default otherwise, or ?tls=none); smtps:// speaks TLS from the first byte.
// Certificates are always verified, against the system's roots plus
// Config.CAFile; there is no way to skip it. Credentials go out over TLS
// only (AUTH PLAIN, or LOGIN where PLAIN is not offered).
//
// Sessions: a worker sends many emails to one server, and the dial,
// greeting, EHLO, STARTTLS and AUTH are most of a fresh session's round
// trips, so sessions are kept in a pool of at most Config.MaxSessions and
// reused. A session that failed in any way is closed, never reused, so no
// broken state carries over.
//
// Errors say where the failure happened, which is what the worker decides
// on: a 5xx reply to this message's MAIL, RCPT or DATA is
// notify.Permanent; a 4xx reply is a plain error (retry later); a failure
// of the server itself (dial, TLS, greeting, EHLO, STARTTLS, AUTH, a 421
// anywhere, a connection lost, no answer within the timeout) is
// notify.SenderDown: no fault of the message, the worker backs off and
// probes (Sender.Probe) until the server is back.
package smtp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"time"

	gosmtp "github.com/emersion/go-smtp"
	"golang.org/x/time/rate"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
)

// DefaultTimeout is the Timeout of a Config that leaves it zero.
const DefaultTimeout = 30 * time.Second

// Config configures a Sender.
type Config struct {
	// URL is smtp://[user:pass@]host[:port][?tls=required|opportunistic|none]
	// (port 25 by default; STARTTLS as tls= says, required by default with
	// credentials, opportunistic without; credentials with tls=none or
	// opportunistic are refused: they would cross the wire in clear), or
	// smtps://[user:pass@]host[:port] for implicit TLS (port 465 by
	// default). With user:pass the sender authenticates with AUTH PLAIN
	// (LOGIN when the server offers no PLAIN). Required.
	URL string
	// From is the envelope sender (MAIL FROM), a single address. Default:
	// each email's own From address.
	From string
	// Timeout bounds one whole Send: the wait for its turn under Rate and
	// for a free session, the dial, every command and the data. A Send is
	// always bounded, so zero means DefaultTimeout (30s); it must not be
	// negative. Whoever holds a claim on a message across a Send (the
	// worker's lease) must hold it longer than this: see Sender.Timeout.
	Timeout time.Duration
	// HelloName is the name given in EHLO/HELO. Default "localhost".
	HelloName string
	// TLSConfig is the base of the TLS configuration for STARTTLS and
	// smtps://. Default: the system roots, verifying the URL's host name.
	// InsecureSkipVerify is refused.
	TLSConfig *tls.Config
	// CAFile names a file of PEM certificates trusted besides the system's
	// roots (or TLSConfig's RootCAs): a private CA. Default: none.
	CAFile string
	// MaxSessions is the most sessions open at once, in use or kept; a Send
	// beyond it waits for a free one (within Timeout). herald passes
	// HERALD_PREFETCH: one per delivery in flight. Zero means no bound; it
	// must not be negative.
	MaxSessions int
	// MaxIdle is the number of open sessions kept for reuse between sends;
	// herald passes HERALD_PREFETCH. Zero is honoured: no session is kept
	// and every Send opens a fresh one. It must not be negative.
	MaxIdle int
	// IdleTimeout closes a kept session unused for this long, before the
	// server's own idle timeout (RFC 5321 asks servers for at least 5
	// minutes) drops it. Zero means the default, 30s (MaxIdle 0 is the way
	// to keep no session); it must not be negative.
	IdleTimeout time.Duration
	// Rate is the most emails per second handed to the server (a
	// provider's limit), with bursts of up to one second's worth (at least
	// one). Zero means no limit; it must not be negative. A Send that
	// cannot get its turn within Timeout fails with a plain error.
	Rate float64
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
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
	case c.MaxSessions < 0:
		return errors.New("max sessions must not be negative")
	case c.MaxIdle < 0:
		return errors.New("max idle sessions must not be negative")
	case c.IdleTimeout < 0:
		return errors.New("idle timeout must not be negative")
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return errors.New("rate must be a non-negative number")
	case c.TLSConfig != nil && c.TLSConfig.InsecureSkipVerify:
		return errors.New("certificate verification cannot be turned off: trust a private CA with a CA file instead")
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

// tlsMode is what an smtp:// session does about STARTTLS.
type tlsMode string

const (
	// tlsRequired: STARTTLS or nothing is sent.
	tlsRequired tlsMode = "required"
	// tlsOpportunistic: STARTTLS when the server offers it, else in clear.
	tlsOpportunistic tlsMode = "opportunistic"
	// tlsNone: never STARTTLS.
	tlsNone tlsMode = "none"
)

// Sender sends emails over SMTP. It is safe for concurrent use.
type Sender struct {
	cfg      Config
	addr     string // host:port
	host     string
	implicit bool // smtps://
	mode     tlsMode
	user     string
	pass     string
	from     string // bare envelope sender, "" for each email's own
	tls      *tls.Config
	limiter  *rate.Limiter // nil without a Rate

	// slots holds one token per open session (in use or idle) when
	// MaxSessions bounds them; nil for no bound.
	slots chan struct{}
	idle  chan *session // sessions kept for reuse
}

// New checks cfg, reads CAFile and returns a Sender. It does not touch the
// network.
func New(cfg Config) (*Sender, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("smtp config: %w", err)
	}
	s := &Sender{cfg: cfg, idle: make(chan *session, cfg.MaxIdle)}
	if cfg.MaxSessions > 0 {
		s.slots = make(chan struct{}, cfg.MaxSessions)
	}
	if err := s.parseURL(cfg.URL); err != nil {
		return nil, fmt.Errorf("smtp config: %w", err)
	}
	tc, err := cfg.tlsConfig(s.host)
	if err != nil {
		return nil, fmt.Errorf("smtp config: %w", err)
	}
	s.tls = tc
	if cfg.From != "" {
		// validate has parsed it already.
		s.from, _ = notify.ParseAddress(cfg.From)
	}
	if cfg.Rate > 0 {
		s.limiter = rate.NewLimiter(rate.Limit(cfg.Rate), max(1, int(cfg.Rate)))
	}
	return s, nil
}

// tlsConfig is the client TLS configuration: TLSConfig or the defaults,
// the server's name to verify, and CAFile's certificates trusted.
func (c Config) tlsConfig(host string) (*tls.Config, error) {
	tc := &tls.Config{}
	if c.TLSConfig != nil {
		tc = c.TLSConfig.Clone()
	}
	if tc.ServerName == "" {
		tc.ServerName = host
	}
	if c.CAFile == "" {
		return tc, nil
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := tc.RootCAs
	if pool != nil {
		pool = pool.Clone()
	} else if pool, err = x509.SystemCertPool(); err != nil {
		// No system roots (a bare container): the CA file alone.
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", c.CAFile)
	}
	tc.RootCAs = pool
	return tc, nil
}

// parseURL reads the server address, credentials and TLS mode. Its errors
// never quote the URL: it may hold a password.
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
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return errors.New("URL must be scheme://[user:pass@]host[:port][?tls=...] with no path")
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
	return s.parseTLSMode(u.RawQuery)
}

// parseTLSMode reads ?tls= and checks it against the scheme and the
// credentials.
func (s *Sender) parseTLSMode(rawQuery string) error {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return errors.New("URL query is malformed")
	}
	for k := range q {
		if k != "tls" {
			return fmt.Errorf("URL query parameter %q is unknown: only tls= is", k)
		}
	}
	vals := q["tls"]
	if len(vals) > 1 {
		return errors.New("URL query has more than one tls=")
	}
	s.mode = tlsOpportunistic
	if s.user != "" || s.implicit {
		s.mode = tlsRequired
	}
	if len(vals) == 0 {
		return nil
	}
	switch m := tlsMode(vals[0]); m {
	case tlsRequired, tlsOpportunistic, tlsNone:
		if m != tlsRequired && s.implicit {
			return fmt.Errorf("tls=%s contradicts smtps://, which is TLS from the first byte", m)
		}
		if m != tlsRequired && s.user != "" {
			return fmt.Errorf("tls=%s with credentials would let them cross the wire in clear: drop tls= (credentials need tls=required) or use smtps://", m)
		}
		s.mode = m
		return nil
	default:
		return fmt.Errorf("tls=%q: want required, opportunistic or none", vals[0])
	}
}

// Timeout returns the longest a Send (or a Probe) takes: Config.Timeout, or
// DefaultTimeout when that was zero. A caller that holds a lease on a
// message across a Send (the worker's claim) must make the lease longer
// than this, or another worker may take the message while it is still
// being sent.
func (s *Sender) Timeout() time.Duration { return s.cfg.Timeout }

// Send delivers e. A nil return means the server accepted the message. An
// error marked notify.Permanent means the server refused this message for
// good (a 5xx reply to its MAIL, RCPT or DATA) or the email can never be
// sent; one marked notify.SenderDown means the server itself failed (see
// the package doc), no fault of the message; any other error (a 4xx reply,
// the rate limit, ctx ending) may pass on a retry.
func (s *Sender) Send(ctx context.Context, e notify.Email) error {
	if err := s.send(ctx, e); err != nil {
		return fmt.Errorf("smtp send: %w", err)
	}
	return nil
}

func (s *Sender) send(parent context.Context, e notify.Email) error {
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

	ctx, cancel := context.WithTimeout(parent, s.cfg.Timeout)
	defer cancel()
	if s.limiter != nil {
		// Wait fails at once when the turn would come after ctx's
		// deadline, without taking it.
		if err := s.limiter.Wait(ctx); err != nil {
			if parent.Err() != nil {
				return fmt.Errorf("wait for the rate limit: %w", parent.Err())
			}
			return fmt.Errorf("rate limit of %g emails/s: no turn within the %s timeout: %w", s.cfg.Rate, s.cfg.Timeout, err)
		}
	}
	for {
		ses, reused, err := s.take(ctx)
		if err != nil {
			return s.ended(parent, ctx, err, false)
		}
		// go-smtp's client sets its own deadline per command; closing the
		// connection is what makes ctx (and the overall timeout) interrupt
		// it.
		stop := context.AfterFunc(ctx, func() { _ = ses.conn.Close() })
		step, err := transact(ses.c, from, to, data)
		interrupted := !stop()
		if err == nil {
			if interrupted {
				s.discard(ses)
			} else {
				s.keep(ses)
			}
			return nil
		}
		s.discard(ses)
		// A kept session the server dropped while it was idle fails at its
		// first command, before any mail was handed over: try once more
		// on a fresh session.
		if reused && step == stepMail && ctx.Err() == nil && dropped(err) {
			continue
		}
		return s.ended(parent, ctx, s.classify(ses, step, err), true)
	}
}

// Steps of a mail transaction, as errors name them.
const (
	stepMail    = "mail from"
	stepRcpt    = "rcpt to"
	stepData    = "data"
	stepWrite   = "write data"
	stepEndData = "end data"
)

// classify marks a failed transaction step by where the fault lies: the
// message (5xx: permanent), the moment (4xx: retry) or the server (421, a
// demand for TLS or AUTH, a lost connection: sender down).
func (s *Sender) classify(ses *session, step string, err error) error {
	err = fmt.Errorf("%s: %w", step, err)
	var serr *gosmtp.SMTPError
	if !errors.As(err, &serr) {
		return notify.SenderDown(fmt.Errorf("connection lost: %w", err))
	}
	switch {
	case serr.Code == 421:
		return notify.SenderDown(fmt.Errorf("server closing the session: %w", err))
	case serr.Code == 530 && step == stepMail:
		// RFC 3207 and 4954: TLS or authentication required; the server
		// takes no mail from this configuration at all.
		switch {
		case !ses.tls:
			return notify.SenderDown(fmt.Errorf("the server demands STARTTLS (tls=%s, the session is in clear): %w", s.mode, err))
		case s.user == "":
			return notify.SenderDown(fmt.Errorf("the server demands authentication and the URL has no credentials: %w", err))
		}
		return notify.SenderDown(err)
	case serr.Code >= 500 && serr.Code <= 599:
		return notify.Permanent(err)
	}
	return err
}

// ended reports a Send or Probe whose ctx ended as such rather than as the
// closed connection that caused. The caller's own cancellation is a plain
// error. A timeout (the sender's or the caller's deadline, whichever fired
// first: the outcome must not depend on that race) is classified by where
// it happened, like every failure: before the mail transaction (dial,
// greeting, EHLO, TLS, AUTH, a free session) the server did not answer, a
// failure of the server (SenderDown, no attempt spent); inside it (MAIL,
// RCPT, DATA) this message was not accepted in time, a failure to retry. A
// reply the server did give keeps its own meaning.
func (s *Sender) ended(parent, ctx context.Context, err error, inTransaction bool) error {
	var serr *gosmtp.SMTPError
	switch {
	case errors.As(err, &serr):
		return err
	case errors.Is(parent.Err(), context.Canceled):
		return fmt.Errorf("%w (%v)", parent.Err(), err)
	case ctx.Err() != nil && inTransaction:
		return fmt.Errorf("the message was not accepted within the %s timeout: %w (%v)", s.cfg.Timeout, ctx.Err(), err)
	case ctx.Err() != nil:
		return notify.SenderDown(fmt.Errorf("no answer within the %s timeout: %w (%v)", s.cfg.Timeout, ctx.Err(), err))
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

// transact runs one mail transaction on a greeted session and names the
// step that failed.
func transact(c *gosmtp.Client, from, to string, data []byte) (string, error) {
	if err := c.Mail(from, nil); err != nil {
		return stepMail, err
	}
	if err := c.Rcpt(to, nil); err != nil {
		return stepRcpt, err
	}
	w, err := c.Data()
	if err != nil {
		return stepData, err
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return stepWrite, err
	}
	if err := w.Close(); err != nil {
		return stepEndData, err
	}
	return "", nil
}
