package smtp

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	gosmtp "github.com/emersion/go-smtp"

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
	// Timeout bounds the network part of one Send: the dial, TLS,
	// greeting, EHLO, AUTH, every command and the data. It starts once the
	// Send has its session slot (see MaxSessions): waiting for a slot is a
	// local limit, bounded by the caller's ctx only. A Send is always
	// bounded, so zero means DefaultTimeout (30s); it must not be
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
	// MaxSessions is the most sessions open at once, in use or kept. A
	// Send beyond it waits for a free one on the caller's ctx, before its
	// Timeout starts: a full pool is a local limit, so it never makes a
	// send time out and is never reported as the server's fault. herald
	// passes HERALD_PREFETCH, one per delivery in flight, so that a
	// delivery never waits. Zero means no bound; it must not be negative.
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
}

func (c Config) withDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.HelloName = cmp.Or(c.HelloName, "localhost")
	c.IdleTimeout = cmp.Or(c.IdleTimeout, 30*time.Second)
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

// Timeout returns the longest the network part of a Send (or a Probe)
// takes: Config.Timeout, or DefaultTimeout when that was zero. The wait
// for a free session slot (Config.MaxSessions) comes before it and is
// bounded by the caller's ctx alone. A caller that holds a lease on a
// message across a Send (the worker's claim) must make the lease longer
// than this plus any such wait (none when it never has more sends in
// flight than MaxSessions), or another worker may take the message while
// it is still being sent.
func (s *Sender) Timeout() time.Duration { return s.cfg.Timeout }

// Send delivers e. A nil return means the server accepted the message.
// Otherwise the error says whose fault the failure was (see the package
// doc): marked notify.Permanent, the server refused this message for good
// (a 5xx reply to its MAIL, RCPT or DATA) or the email can never be sent;
// marked notify.Throttled, the server replied 421 (slow down; no attempt
// spent); marked notify.SenderDown, the server failed before the message
// was handed over (no attempt spent); unmarked, this message's attempt
// failed (a 4xx reply, the connection lost or no answer in time once MAIL
// FROM was sent) or ctx ended.
func (s *Sender) Send(ctx context.Context, e mail.Email) error {
	if err := s.send(ctx, e); err != nil {
		return fmt.Errorf("smtp send: %w", err)
	}
	return nil
}

func (s *Sender) send(parent context.Context, e mail.Email) error {
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
	// Domains go out in their IDNA form; a local part that is not ASCII
	// needs a server that offers SMTPUTF8 (checked once the session has
	// its EHLO reply).
	to, toUTF8, err := notify.SMTPAddress(to)
	if err != nil {
		return notify.Permanent(fmt.Errorf("recipient: %w", err))
	}
	from, fromUTF8, err := notify.SMTPAddress(from)
	if err != nil {
		return notify.Permanent(fmt.Errorf("sender: %w", err))
	}
	var opts *gosmtp.MailOptions
	if toUTF8 || fromUTF8 {
		opts = &gosmtp.MailOptions{UTF8: true}
	}
	// The same Message-ID on every attempt: see the package doc.
	data := mail.Render(e, time.Now().UTC()) // the Date header in UTC, whatever TZ says

	// A free session slot is a local limit: it is waited for on the
	// caller's ctx, before the timeout starts, and its wait is nobody's
	// fault.
	ses, err := s.take(parent)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.Timeout)
	defer cancel()
	for {
		if ses == nil {
			// take reserved a slot (or none is needed): open a session
			// in it.
			if ses, err = s.open(ctx); err != nil {
				s.free()
				return s.beforeMail(parent, ctx, err)
			}
		}
		if opts != nil {
			if ok, _ := ses.c.Extension("SMTPUTF8"); !ok {
				// The server can never take this address: the message's
				// failure for good, found before MAIL FROM; the session
				// is as good as it was.
				s.keep(ses)
				addr := to
				if !toUTF8 {
					addr = from
				}
				return notify.Permanent(fmt.Errorf("the address %s has a non-ASCII local part and the server does not offer SMTPUTF8 (RFC 6531)", addr))
			}
		}
		// go-smtp's client sets its own deadline per command; closing the
		// connection is what makes ctx (and the overall timeout) interrupt
		// it.
		stop := context.AfterFunc(ctx, func() { _ = ses.conn.Close() })
		st, sent, err := transact(ses, from, to, opts, data)
		interrupted := !stop()
		if err == nil {
			if interrupted {
				s.discard(ses)
			} else {
				s.keep(ses)
			}
			return nil
		}
		// A kept session the server dropped while it was idle fails at its
		// first command, MAIL, before the server could have taken it up:
		// close it and try once more on a fresh session, in the same slot.
		// A 421 there is taken as such a drop too; a fresh session that
		// gets it again reports it.
		if ses.reused && st == stepMail && ctx.Err() == nil && dropped(err) {
			_ = ses.conn.Close()
			ses = nil
			continue
		}
		s.discard(ses)
		if !sent {
			// Nothing of MAIL FROM reached the wire: the session failed
			// before the hand-over began.
			return s.beforeMail(parent, ctx, fmt.Errorf("before MAIL FROM was written: %w", err))
		}
		return s.afterMail(parent, ctx, ses, st, err)
	}
}

// step is a step of a mail transaction, named in errors.
type step int

const (
	stepMail    step = iota // MAIL FROM, and its reply
	stepRcpt                // RCPT TO, and its reply
	stepData                // the DATA command, and its 354
	stepWrite               // writing the message data
	stepEndData             // the final reply to the data
)

// replied names the step a reply answered.
func (st step) replied() string {
	return [...]string{"MAIL FROM", "RCPT TO", "DATA", "DATA", "DATA (final reply)"}[st]
}

// lost says where in the step the connection was lost.
func (st step) lost() string {
	return [...]string{
		"after MAIL FROM",
		"after RCPT TO",
		"after the DATA command",
		"during DATA, writing the message",
		"after DATA, awaiting the final reply",
	}[st]
}

// replyCode returns the code of the server's reply err holds, or 0 when
// it holds none (a network failure, a timeout).
func replyCode(err error) int {
	var serr *gosmtp.SMTPError
	if errors.As(err, &serr) {
		return serr.Code
	}
	return 0
}

// beforeMail classifies a Send that failed before MAIL FROM was written:
// nothing of the message was handed over, so it is the provider's fault,
// never the message's attempt. A 421 (at the greeting, EHLO, AUTH or the
// MAIL of a fresh session) is the provider throttling; anything else is
// the provider down (see down).
func (s *Sender) beforeMail(parent, ctx context.Context, err error) error {
	if replyCode(err) == 421 {
		// SMTP carries no Retry-After: the worker's own backoff decides.
		return notify.Throttled(err, 0)
	}
	return s.down(parent, ctx, err)
}

// down classifies a failure to open a session (or to use one before MAIL
// FROM) as the provider down, unless the caller gave up: ctx cancelled is
// a plain error. A timeout, the sender's or the caller's deadline
// (whichever fired first: the outcome must not depend on that race), means
// the server did not answer.
func (s *Sender) down(parent, ctx context.Context, err error) error {
	switch {
	case replyCode(err) != 0:
		// A reply the server did give keeps its own meaning.
		return notify.SenderDown(err)
	case errors.Is(parent.Err(), context.Canceled):
		return fmt.Errorf("%w (%v)", parent.Err(), err)
	case ctx.Err() != nil:
		return notify.SenderDown(fmt.Errorf("no answer within the %s timeout, before MAIL FROM: %w (%v)", s.cfg.Timeout, ctx.Err(), err))
	}
	return notify.SenderDown(err)
}

// afterMail classifies a Send that failed once MAIL FROM was sent: the
// message was being handed over, so the failure is this message's attempt
// (a plain error: retry, and dead-letter after the last), or, for a 5xx,
// refused for good. Two replies say something about the server instead:
// 421 (throttling) and 530 to MAIL (this configuration lacks the TLS or
// authentication the server demands).
func (s *Sender) afterMail(parent, ctx context.Context, ses *session, st step, err error) error {
	switch code := replyCode(err); {
	case code == 421:
		return notify.Throttled(fmt.Errorf("421 at %s: provider throttling: %w", st.replied(), err), 0)
	case code == 530 && st == stepMail:
		// RFC 3207 and 4954: TLS or authentication required; the server
		// takes no mail from this configuration at all.
		switch {
		case !ses.tls:
			return notify.SenderDown(fmt.Errorf("530 at MAIL FROM: the server demands STARTTLS (tls=%s, the session is in clear): %w", s.mode, err))
		case s.user == "":
			return notify.SenderDown(fmt.Errorf("530 at MAIL FROM: the server demands authentication and the URL has no credentials: %w", err))
		}
		return notify.SenderDown(fmt.Errorf("530 at MAIL FROM: %w", err))
	case code >= 500 && code <= 599:
		return notify.Permanent(fmt.Errorf("%s refused the message for good: %w", st.replied(), err))
	case code != 0:
		return fmt.Errorf("%s refused the message for now (the message's attempt): %w", st.replied(), err)
	case errors.Is(parent.Err(), context.Canceled):
		return fmt.Errorf("%w (%s: %v)", parent.Err(), st.lost(), err)
	case ctx.Err() != nil:
		// The sender's timeout or the caller's deadline, whichever fired
		// first.
		return fmt.Errorf("the message was not accepted within the %s timeout (no answer %s): %w (%v) (the message's attempt)", s.cfg.Timeout, st.lost(), ctx.Err(), err)
	}
	// Closed, reset or EOF: the server may have dropped the connection
	// because of this very message, so it is the message's attempt, which
	// runs out, rather than a server failure, which would not.
	return fmt.Errorf("connection lost %s: %w (the message's attempt)", st.lost(), err)
}

// dropped reports whether err says the server closed the session: a network
// error, or 421 "service not available, closing channel".
func dropped(err error) bool {
	code := replyCode(err)
	return code == 0 || code == 421
}

// transact runs one mail transaction on a greeted session. It names the
// step that failed and whether MAIL FROM had reached the wire by then: the
// line between the provider's fault and the message's attempt.
func transact(ses *session, from, to string, opts *gosmtp.MailOptions, data []byte) (_ step, mailSent bool, _ error) {
	before := ses.out.written
	if err := ses.c.Mail(from, opts); err != nil {
		return stepMail, ses.out.written > before, err
	}
	if err := ses.c.Rcpt(to, nil); err != nil {
		return stepRcpt, true, err
	}
	w, err := ses.c.Data()
	if err != nil {
		return stepData, true, err
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return stepWrite, true, err
	}
	if err := w.Close(); err != nil {
		return stepEndData, true, err
	}
	return 0, true, nil
}
