package smtp

import (
	"bufio"
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
	conn      net.Conn // the TCP connection: closing it interrupts anything
	c         *gosmtp.Client
	tls       bool
	idleSince time.Time
}

// take returns a kept session, or opens a new one when MaxSessions allows,
// waiting for one to come free otherwise.
func (s *Sender) take(ctx context.Context) (*session, bool, error) {
	for {
		// A kept session first: no dial, no wait.
		select {
		case ses := <-s.idle:
			if s.fresh(ses) {
				return ses, true, nil
			}
			s.discard(ses)
			continue
		default:
		}
		if s.slots == nil {
			ses, err := s.open(ctx)
			return ses, false, err
		}
		select {
		case ses := <-s.idle:
			if s.fresh(ses) {
				return ses, true, nil
			}
			s.discard(ses)
		case s.slots <- struct{}{}:
			ses, err := s.open(ctx)
			if err != nil {
				<-s.slots
			}
			return ses, false, err
		case <-ctx.Done():
			return nil, false, fmt.Errorf("wait for a free session (all %d in use): %w", cap(s.slots), ctx.Err())
		}
	}
}

// fresh reports whether a kept session is young enough to reuse.
func (s *Sender) fresh(ses *session) bool {
	return time.Since(ses.idleSince) < s.cfg.IdleTimeout
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
	if s.slots != nil {
		<-s.slots
	}
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
// or ctx's when ctx ended first). It checks a kept session with NOOP, or
// opens a fresh one (dial, greeting, EHLO, STARTTLS, AUTH: everything a
// send needs before its transaction) and keeps it for the next send, or
// ends it with QUIT when no more sessions are kept. The worker probes while
// the server is down, to know when to resume sending.
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
	ctx, cancel := context.WithTimeout(parent, s.cfg.Timeout)
	defer cancel()
	for {
		// A kept session that answers NOOP is proof enough; one that does
		// not was dropped while idle, which says nothing about the server.
		select {
		case ses := <-s.idle:
			if !s.fresh(ses) {
				s.discard(ses)
				continue
			}
			stop := context.AfterFunc(ctx, func() { _ = ses.conn.Close() })
			err := ses.c.Noop()
			if stop() && err == nil {
				s.keep(ses)
				return nil
			}
			s.discard(ses)
			continue
		default:
		}
		break
	}
	if s.slots != nil {
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return s.ended(parent, ctx, fmt.Errorf("wait for a free session (all %d in use): %w", cap(s.slots), ctx.Err()), false)
		}
	}
	ses, err := s.open(ctx)
	if err != nil {
		if s.slots != nil {
			<-s.slots
		}
		return s.ended(parent, ctx, err, false)
	}
	s.keep(ses)
	return nil
}

// open dials and sets up a new session: TLS (implicit or STARTTLS),
// greeting, EHLO, AUTH. Every error it returns is marked SenderDown: none
// of this concerns a message.
func (s *Sender) open(ctx context.Context) (_ *session, err error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, notify.SenderDown(fmt.Errorf("dial %s: %w", s.addr, err))
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
	hello := "greeting or EHLO"
	switch {
	case s.implicit:
		tc, err := s.handshake(ctx, raw)
		if err != nil {
			return nil, err
		}
		conn, ses.tls = tc, true
	case s.mode != tlsNone:
		conn, ses.tls, err = s.startTLS(ctx, raw)
		if err != nil {
			return nil, err
		}
		hello = "EHLO"
	}
	c := gosmtp.NewClient(conn)
	// ctx carries the deadline that counts; the client's own per-command
	// deadlines only back it up, later, so that a timeout reports as one.
	c.CommandTimeout = s.cfg.Timeout + time.Second
	c.SubmissionTimeout = s.cfg.Timeout + time.Second
	if err := c.Hello(s.cfg.HelloName); err != nil {
		return nil, notify.SenderDown(fmt.Errorf("%s: %w", hello, err))
	}
	if s.user != "" {
		if err := s.auth(c, ses.tls); err != nil {
			return nil, err
		}
	}
	ses.c = c
	return ses, nil
}

// handshake runs the TLS handshake on conn, verifying the server's
// certificate.
func (s *Sender) handshake(ctx context.Context, conn net.Conn) (*tls.Conn, error) {
	tc := tls.Client(conn, s.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) {
			return nil, notify.SenderDown(fmt.Errorf("TLS handshake with %s: %w (a private CA is trusted through HERALD_SMTP_CA_FILE)", s.addr, err))
		}
		return nil, notify.SenderDown(fmt.Errorf("TLS handshake with %s: %w", s.addr, err))
	}
	return tc, nil
}

// startTLS reads the greeting, says EHLO and upgrades the session with
// STARTTLS when the server offers it, as the TLS mode asks. go-smtp's
// client has no STARTTLS of its own after a chosen EHLO name, so this part
// of the dialogue is spoken here; the client takes over afterwards with
// the greeting replayed (it expects one) and says EHLO again, as RFC 3207
// requires after TLS. It returns the connection to go on with and whether
// it is TLS.
func (s *Sender) startTLS(ctx context.Context, raw net.Conn) (net.Conn, bool, error) {
	br := bufio.NewReader(raw)
	tp := textproto.NewReader(br)
	if _, _, err := tp.ReadResponse(220); err != nil {
		return nil, false, notify.SenderDown(fmt.Errorf("greeting: %w", reply(err)))
	}
	if _, err := fmt.Fprintf(raw, "EHLO %s\r\n", s.cfg.HelloName); err != nil {
		return nil, false, notify.SenderDown(fmt.Errorf("EHLO: %w", err))
	}
	_, msg, err := tp.ReadResponse(250)
	if err != nil {
		var terr *textproto.Error
		if s.mode == tlsOpportunistic && errors.As(err, &terr) && (terr.Code == 500 || terr.Code == 502) {
			// No EHLO, so no STARTTLS: go on in clear, with HELO.
			return greeted(raw, br), false, nil
		}
		return nil, false, notify.SenderDown(fmt.Errorf("EHLO: %w", reply(err)))
	}
	if !offers(msg, "STARTTLS") {
		switch {
		case s.mode == tlsOpportunistic:
			return greeted(raw, br), false, nil
		case s.user != "":
			return nil, false, notify.SenderDown(errors.New("the server does not offer STARTTLS: the credentials would cross the wire in clear, so nothing was sent (tls=required)"))
		}
		return nil, false, notify.SenderDown(errors.New("the server does not offer STARTTLS and tls=required: nothing was sent"))
	}
	if _, err := fmt.Fprintf(raw, "STARTTLS\r\n"); err != nil {
		return nil, false, notify.SenderDown(fmt.Errorf("STARTTLS: %w", err))
	}
	if _, _, err := tp.ReadResponse(220); err != nil {
		return nil, false, notify.SenderDown(fmt.Errorf("STARTTLS: %w", reply(err)))
	}
	if br.Buffered() > 0 {
		// Bytes sent before the handshake would be read as if they came
		// over TLS: a man in the middle injecting commands (CVE-2011-0411).
		return nil, false, notify.SenderDown(errors.New("STARTTLS: the server sent data before the TLS handshake"))
	}
	tc, err := s.handshake(ctx, raw)
	if err != nil {
		return nil, false, err
	}
	return greeted(tc, tc), true, nil
}

// offers reports whether an EHLO reply lists the extension ext.
func offers(ehlo, ext string) bool {
	lines := strings.Split(ehlo, "\n")
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && strings.EqualFold(f[0], ext) {
			return true
		}
	}
	return false
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

// greeted returns conn with a greeting replayed before what r reads.
func greeted(conn net.Conn, r io.Reader) net.Conn {
	return &greetedConn{Conn: conn, r: io.MultiReader(strings.NewReader("220 greeted\r\n"), r)}
}

// auth authenticates with PLAIN, or LOGIN where PLAIN is not offered, over
// TLS only.
func (s *Sender) auth(c *gosmtp.Client, overTLS bool) error {
	if !overTLS {
		// parseURL lets no credentials through without TLS; this is the
		// belt to its braces.
		return notify.SenderDown(errors.New("refusing to send credentials without TLS"))
	}
	var a sasl.Client
	switch {
	case c.SupportsAuth(sasl.Plain):
		a = sasl.NewPlainClient("", s.user, s.pass)
	case c.SupportsAuth(sasl.Login):
		a = &loginClient{user: s.user, pass: s.pass}
	default:
		_, mechs := c.Extension("AUTH")
		return notify.SenderDown(fmt.Errorf("the server offers no AUTH PLAIN or LOGIN (AUTH %q)", mechs))
	}
	// The error names the user but never the password; go-sasl and the
	// server's reply do not echo it.
	if err := c.Auth(a); err != nil {
		var serr *gosmtp.SMTPError
		if errors.As(err, &serr) && serr.Code == 535 {
			return notify.SenderDown(fmt.Errorf("authentication failed: wrong username or password for %q: %w", s.user, err))
		}
		return notify.SenderDown(fmt.Errorf("AUTH as %q: %w", s.user, err))
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
