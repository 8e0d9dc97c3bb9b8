package smtp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/heraldhq/herald/internal/notify"
)

// session is one open SMTP session: greeted, over TLS where the mode asks
// for it, authenticated when the URL holds credentials.
type session struct {
	conn      net.Conn      // the TCP connection: closing it interrupts anything
	out       *countingConn // what the client writes through
	c         *gosmtp.Client
	tls       bool
	reused    bool // kept from an earlier send
	idleSince time.Time
}

// countingConn counts the bytes written through it: whether MAIL FROM
// reached the wire decides whose fault a failure is. Only the goroutine
// that uses the session writes, so the count needs no lock.
type countingConn struct {
	net.Conn
	written int64
	helo    bool // HELO was written (the server refused EHLO); read only by hello
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.helo = c.helo || bytes.HasPrefix(b, []byte("HELO "))
	n, err := c.Conn.Write(b)
	c.written += int64(n)
	return n, err
}

// take returns a kept session, or nil with a slot reserved for a new one
// (or none needed: no MaxSessions) that the caller opens, or frees with
// free when it cannot. When MaxSessions are open it waits for one to come
// free, on ctx: the caller's, as this is a local limit, not a failure of
// the server; its error is a plain one.
func (s *Sender) take(ctx context.Context) (*session, error) {
	if err := ctx.Err(); err != nil {
		// The caller gave up before anything was tried: no session, no
		// failure of the server.
		return nil, fmt.Errorf("before sending: %w", err)
	}
	for {
		// A kept session first: no dial, no wait.
		select {
		case ses := <-s.idle:
			if s.reuse(ses) {
				return ses, nil
			}
			continue
		default:
		}
		if s.slots == nil {
			return nil, nil
		}
		select {
		case ses := <-s.idle:
			if s.reuse(ses) {
				return ses, nil
			}
		case s.slots <- struct{}{}:
			return nil, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for a free session (all %d in use): %w", cap(s.slots), ctx.Err())
		}
	}
}

// free gives back a slot take reserved for a session that was not opened.
func (s *Sender) free() {
	if s.slots != nil {
		<-s.slots
	}
}

// reuse reports whether a kept session is young enough to serve again,
// and marks it reused; an older one is discarded.
func (s *Sender) reuse(ses *session) bool {
	if time.Since(ses.idleSince) >= s.cfg.IdleTimeout {
		s.discard(ses)
		return false
	}
	ses.reused = true
	return true
}

// keep puts a session that just completed a transaction back for reuse, or
// ends it politely when enough are kept.
func (s *Sender) keep(ses *session) {
	ses.idleSince = time.Now()
	select {
	case s.idle <- ses:
	default:
		s.quit(ses)
	}
}

// quit ends a session with QUIT, not waiting long for the answer: nothing
// depends on it.
func (s *Sender) quit(ses *session) {
	ses.c.CommandTimeout = time.Second
	_ = ses.c.Quit()
	s.discard(ses)
}

// discard closes a session and frees its place in the pool.
func (s *Sender) discard(ses *session) {
	_ = ses.conn.Close()
	s.free()
}

// Close ends the kept sessions. Sends after Close open fresh sessions.
func (s *Sender) Close() error {
	for {
		select {
		case ses := <-s.idle:
			s.quit(ses)
		default:
			return nil
		}
	}
}

// Probe reports whether the server takes mail from this sender now: nil,
// or an error marked notify.SenderDown saying why not (the server's reason,
// a 421 included, or ctx's when ctx ended first). It checks a kept session
// with NOOP, or opens a fresh one (dial, greeting, EHLO, STARTTLS, AUTH:
// everything a send needs before its transaction) and keeps it for the
// next send, or ends it with QUIT when no more sessions are kept. Like a
// Send, it waits for a free session slot on ctx before its Timeout starts.
// The worker probes while the server is down, to know when to resume
// sending.
func (s *Sender) Probe(ctx context.Context) error {
	if err := s.probe(ctx); err != nil {
		if !notify.IsSenderDown(err) {
			err = notify.SenderDown(err)
		}
		return fmt.Errorf("smtp probe: %w", err)
	}
	return nil
}

func (s *Sender) probe(parent context.Context) error {
	for {
		ses, err := s.take(parent)
		if err != nil {
			return err
		}
		if ses == nil {
			break
		}
		// A kept session that answers NOOP is proof enough; one that does
		// not was dropped while idle, which says nothing about the server.
		if s.noop(parent, ses) {
			s.keep(ses)
			return nil
		}
		s.discard(ses)
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.Timeout)
	defer cancel()
	ses, err := s.open(ctx)
	if err != nil {
		s.free()
		// A probe asks only whether to resume: a 421 is a no as well.
		return s.down(parent, ctx, err)
	}
	s.keep(ses)
	return nil
}

// noop reports whether a kept session answers NOOP within the timeout.
func (s *Sender) noop(parent context.Context, ses *session) bool {
	ctx, cancel := context.WithTimeout(parent, s.cfg.Timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = ses.conn.Close() })
	err := ses.c.Noop()
	return stop() && err == nil
}

// open dials and sets up a new session: TLS (implicit or STARTTLS),
// greeting, EHLO, AUTH. None of this concerns a message: the caller marks
// its errors as the provider's (beforeMail, down); they name the command
// and the server's reply.
//
// One EHLO per session, and one more after STARTTLS, as RFC 3207 asks:
// the EHLO whose reply says whether STARTTLS is offered is the session's
// EHLO when it goes on in clear (strict servers answer a second one with
// 503). AUTH is not followed by another EHLO.
func (s *Sender) open(ctx context.Context) (_ *session, err error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return nil, fmt.Errorf("the SMTP host %q does not resolve: %w", s.host, err)
		}
		return nil, fmt.Errorf("dial %s: %w", s.addr, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	defer stop()
	defer func() {
		if err != nil {
			_ = raw.Close()
		}
	}()
	ses := &session{conn: raw}
	var conn net.Conn = raw
	if s.implicit {
		tc, err := s.handshake(ctx, raw)
		if err != nil {
			return nil, err
		}
		conn, ses.tls = tc, true
	}
	c, br, err := s.hello(ses, conn, false)
	if err != nil {
		return nil, err
	}
	if !s.implicit && s.mode != tlsNone {
		offered, _ := c.Extension("STARTTLS")
		switch {
		case offered:
			tc, err := s.startTLS(ctx, raw, br)
			if err != nil {
				return nil, err
			}
			// A new client: the one in clear may hold bytes read before
			// the handshake, which must never pass for the server's.
			if c, _, err = s.hello(ses, tc, true); err != nil {
				return nil, err
			}
			ses.tls = true
		case s.mode == tlsOpportunistic:
			// Not offered: on in clear, greeted already.
		default:
			return nil, s.noStartTLS(ses.out.helo)
		}
	}
	if s.user != "" {
		if err := s.auth(c, ses.tls); err != nil {
			return nil, err
		}
	}
	ses.c = c
	return ses, nil
}

// hello reads the server's greeting on conn (none after STARTTLS: RFC
// 3207 has the client speak first) and says EHLO (HELO when the server
// answers EHLO with 500 or 502), through a go-smtp client that goes on
// with the session and writes through ses.out. It returns the client and
// the reader of what the server sends, which holds what the client has
// not taken.
func (s *Sender) hello(ses *session, conn net.Conn, afterTLS bool) (*gosmtp.Client, *bufio.Reader, error) {
	br := bufio.NewReader(conn)
	ehlo := "EHLO after STARTTLS"
	if !afterTLS {
		ehlo = "EHLO"
		if _, _, err := textproto.NewReader(br).ReadResponse(220); err != nil {
			return nil, nil, at("the greeting", reply(err))
		}
	}
	ses.out = &countingConn{Conn: conn}
	// go-smtp's client reads a greeting first: one is replayed, the real
	// one (if any) having been read here, so that a refused greeting is
	// named as such and not as a refused EHLO.
	c := gosmtp.NewClient(&greetedConn{Conn: ses.out, r: io.MultiReader(strings.NewReader("220 greeted\r\n"), br)})
	// ctx carries the deadline that counts; the client's own per-command
	// deadlines only back it up, later, so that a timeout reports as one.
	c.CommandTimeout = s.cfg.Timeout + time.Second
	c.SubmissionTimeout = s.cfg.Timeout + time.Second
	if err := c.Hello(s.cfg.HelloName); err != nil {
		if ses.out.helo {
			return nil, nil, at(strings.Replace(ehlo, "EHLO", "HELO (EHLO refused)", 1), err)
		}
		return nil, nil, at(ehlo, err)
	}
	return c, br, nil
}

// noStartTLS is the error of a session in clear that tls=required (or
// credentials) forbids; helo says the server refused EHLO.
func (s *Sender) noStartTLS(helo bool) error {
	why := "the server does not offer STARTTLS"
	if helo {
		why = "the server refused EHLO (HELO only), so it offers no STARTTLS"
	}
	if s.user != "" {
		return errors.New(why + ": the credentials would cross the wire in clear, so nothing was sent (tls=required)")
	}
	return errors.New(why + " and tls=required: nothing was sent")
}

// handshake runs the TLS handshake on conn, verifying the server's
// certificate.
func (s *Sender) handshake(ctx context.Context, conn net.Conn) (*tls.Conn, error) {
	tc := tls.Client(conn, s.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("TLS handshake with %s: %w (a private CA is trusted through HERALD_SMTP_CA_FILE)", s.addr, err)
		}
		return nil, fmt.Errorf("TLS handshake with %s: %w", s.addr, err)
	}
	return tc, nil
}

// startTLS upgrades a greeted session in clear with STARTTLS: br reads
// what the server sends on raw. go-smtp's client has no STARTTLS of its
// own after a chosen EHLO name, so this command is spoken here; a new
// client takes the session over on the TLS connection it returns.
func (s *Sender) startTLS(ctx context.Context, raw net.Conn, br *bufio.Reader) (*tls.Conn, error) {
	if _, err := fmt.Fprintf(raw, "STARTTLS\r\n"); err != nil {
		return nil, fmt.Errorf("STARTTLS: %w", err)
	}
	if _, _, err := textproto.NewReader(br).ReadResponse(220); err != nil {
		return nil, at("STARTTLS", reply(err))
	}
	if br.Buffered() > 0 {
		// Bytes sent before the handshake would be read as if they came
		// over TLS: a man in the middle injecting commands (CVE-2011-0411).
		return nil, errors.New("STARTTLS: the server sent data before the TLS handshake")
	}
	return s.handshake(ctx, raw)
}

// at names the step of opening a session that err came at; a 421 there
// says the provider is throttling.
func at(where string, err error) error {
	if replyCode(err) == 421 {
		return fmt.Errorf("421 at %s: provider throttling: %w", where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// reply turns a textproto reply error into go-smtp's, so that every reply
// error is classified the same way.
func reply(err error) error {
	var terr *textproto.Error
	if errors.As(err, &terr) {
		return &gosmtp.SMTPError{Code: terr.Code, Message: terr.Msg}
	}
	return err
}

// greetedConn replays a greeting to go-smtp's client, which reads one
// first, on a session whose real greeting was already read.
type greetedConn struct {
	net.Conn
	r io.Reader
}

func (c *greetedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// auth authenticates with PLAIN, or LOGIN where PLAIN is not offered, over
// TLS only.
func (s *Sender) auth(c *gosmtp.Client, overTLS bool) error {
	if !overTLS {
		// parseURL lets no credentials through without TLS; this is the
		// belt to its braces.
		return errors.New("refusing to send credentials without TLS")
	}
	var a sasl.Client
	switch {
	case c.SupportsAuth(sasl.Plain):
		a = sasl.NewPlainClient("", s.user, s.pass)
	case c.SupportsAuth(sasl.Login):
		a = &loginClient{user: s.user, pass: s.pass}
	default:
		_, mechs := c.Extension("AUTH")
		return fmt.Errorf("the server offers no AUTH PLAIN or LOGIN (AUTH %q)", mechs)
	}
	// The error names the user but never the password; go-sasl and the
	// server's reply do not echo it.
	if err := c.Auth(a); err != nil {
		if replyCode(err) == 535 {
			return fmt.Errorf("authentication failed: wrong username or password for %q: %w", s.user, err)
		}
		return at(fmt.Sprintf("AUTH as %q", s.user), err)
	}
	return nil
}

// loginClient speaks the LOGIN mechanism: the user name and the password,
// each on the server's challenge. go-sasl's client sends the user name
// with the AUTH command and expects only the password challenge, which
// some servers do not do.
type loginClient struct{ user, pass string }

func (l *loginClient) Start() (string, []byte, error) { return sasl.Login, nil, nil }

func (l *loginClient) Next(challenge []byte) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(string(challenge))) {
	case "username:", "user name", "username":
		return []byte(l.user), nil
	case "password:", "password":
		return []byte(l.pass), nil
	}
	return nil, fmt.Errorf("unexpected LOGIN challenge %q", challenge)
}
