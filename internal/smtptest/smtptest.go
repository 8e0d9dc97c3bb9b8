// Package smtptest runs a real SMTP server in-process, on a loopback port, for
// tests and the chaos harness: it records every message it accepts and can be
// told to refuse transactions with a given reply code.
package smtptest

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Message is one message the server accepted.
type Message struct {
	// From is the envelope sender (MAIL FROM).
	From string
	// To holds the envelope recipients (RCPT TO).
	To []string
	// Data is the message as received, dot-unstuffed.
	Data []byte
	// MessageID is the Message-ID header, angle brackets included.
	MessageID string
	// Subject is the Subject header, RFC 2047-decoded.
	Subject string
	// Header holds every header of the message.
	Header mail.Header
	// Body is the body, decoded from quoted-printable when it says so.
	Body string
}

// Option configures a Server.
type Option func(*Server)

// WithAuth makes the server advertise AUTH PLAIN and require it before MAIL:
// only user and pass are accepted.
func WithAuth(user, pass string) Option {
	return func(s *Server) {
		s.user, s.pass, s.auth = user, pass, true
	}
}

// WithTLS makes the server speak implicit TLS (smtps://) with cfg, which must
// hold a certificate.
func WithTLS(cfg *tls.Config) Option {
	return func(s *Server) { s.tlsConfig = cfg }
}

// Server is a running SMTP server. Its methods are safe for concurrent use.
type Server struct {
	srv  *smtp.Server
	ln   net.Listener
	done chan struct{} // closed when Serve has returned

	auth       bool
	user, pass string
	tlsConfig  *tls.Config

	mu       sync.Mutex
	messages []Message
	attempts int
	failCode int
	failMsg  string
	closed   bool
	// conns are the open client connections; sessions counts every one
	// ever opened.
	conns    map[net.Conn]struct{}
	sessions int
}

// Start starts a server for the test and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := New(opts...)
	if err != nil {
		t.Fatalf("start SMTP server: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts a server on 127.0.0.1 on a free port. Close stops it.
func New(opts ...Option) (*Server, error) {
	s := &Server{done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	for _, opt := range opts {
		opt(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s.ln = ln
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		s.mu.Lock()
		s.sessions++
		s.conns[c.Conn()] = struct{}{}
		s.mu.Unlock()
		return &session{s: s, conn: c.Conn()}, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout = 30 * time.Second
	srv.WriteTimeout = 30 * time.Second
	srv.MaxMessageBytes = 16 << 20
	srv.MaxRecipients = 100
	// Credentials cross loopback only; a test server has no certificate.
	srv.AllowInsecureAuth = true
	srv.ErrorLog = log.New(io.Discard, "", 0)
	s.srv = srv
	served := ln
	if s.tlsConfig != nil {
		served = tls.NewListener(ln, s.tlsConfig)
	}
	go func() {
		defer close(s.done)
		// Serve returns once Close has closed the listener; nothing is
		// left to report then.
		_ = srv.Serve(served)
	}()
	return s, nil
}

// Close stops the server, dropping open connections, and waits until it has
// stopped. Calling it again does nothing.
func (s *Server) Close() {
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if closed {
		return
	}
	// Close only fails when the listener was already closed.
	_ = s.srv.Close()
	// Serve may not have registered the listener with srv yet; closing it
	// here as well makes sure Serve returns.
	_ = s.ln.Close()
	<-s.done
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL returns smtp://host:port (smtps:// WithTLS), the form HERALD_SMTP_URL
// takes.
func (s *Server) URL() string {
	if s.tlsConfig != nil {
		return "smtps://" + s.Addr()
	}
	return "smtp://" + s.Addr()
}

// Messages returns a copy of the messages accepted so far, in order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.messages))
	copy(out, s.messages)
	return out
}

// Count returns the number of messages accepted so far.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.messages)
}

// CountByMessageID returns how many accepted messages carry each Message-ID:
// a value above 1 is a repeated send.
func (s *Server) CountByMessageID() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.messages))
	for _, m := range s.messages {
		out[m.MessageID]++
	}
	return out
}

// Attempts returns the number of transactions started (MAIL FROM commands
// received while authenticated as required), failed ones included.
func (s *Server) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// Fail makes every following transaction fail at RCPT TO with reply code
// (a 4xx or 5xx) and msg, until Fail(0, "") restores normal service.
func (s *Server) Fail(code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failCode, s.failMsg = code, msg
}

// errAuthRequired is RFC 4954's reply to MAIL before AUTH (go-smtp's own
// ErrAuthRequired answers 502).
var errAuthRequired = &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}

// Connections returns the number of client connections (SMTP sessions)
// opened so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions
}

// DropConnections closes every open client connection, as a server that
// times out idle sessions would; the server keeps accepting new ones.
func (s *Server) DropConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
}

// session is one client connection.
type session struct {
	s      *Server
	conn   net.Conn
	authed bool
	from   string
	to     []string
}

func (se *session) AuthMechanisms() []string {
	if !se.s.auth {
		return nil
	}
	return []string{sasl.Plain}
}

func (se *session) Auth(mech string) (sasl.Server, error) {
	if !se.s.auth || mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, user, pass string) error {
		if (identity != "" && identity != user) || user != se.s.user || pass != se.s.pass {
			return smtp.ErrAuthFailed
		}
		se.authed = true
		return nil
	}), nil
}

func (se *session) Mail(from string, _ *smtp.MailOptions) error {
	if se.s.auth && !se.authed {
		return errAuthRequired
	}
	se.s.mu.Lock()
	se.s.attempts++
	se.s.mu.Unlock()
	se.from, se.to = from, nil
	return nil
}

func (se *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	se.s.mu.Lock()
	code, msg := se.s.failCode, se.s.failMsg
	se.s.mu.Unlock()
	if code != 0 {
		return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{code / 100, 0, 0}, Message: msg}
	}
	se.to = append(se.to, to)
	return nil
}

func (se *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("read data: %w", err)
	}
	m := parse(data)
	m.From = se.from
	m.To = append([]string(nil), se.to...)
	se.s.mu.Lock()
	se.s.messages = append(se.s.messages, m)
	se.s.mu.Unlock()
	return nil
}

func (se *session) Reset() { se.from, se.to = "", nil }

func (se *session) Logout() error {
	se.s.mu.Lock()
	delete(se.s.conns, se.conn)
	se.s.mu.Unlock()
	return nil
}

// parse fills in what it can read of a message; a malformed message is still
// recorded, with Data only, so that a test sees what arrived.
func parse(data []byte) Message {
	m := Message{Data: data}
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		return m
	}
	m.Header = msg.Header
	m.MessageID = msg.Header.Get("Message-ID")
	m.Subject = msg.Header.Get("Subject")
	if dec, err := new(mime.WordDecoder).DecodeHeader(m.Subject); err == nil {
		m.Subject = dec
	}
	var body io.Reader = msg.Body
	if strings.EqualFold(msg.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
		body = quotedprintable.NewReader(body)
	}
	// A body that fails to decode keeps what decoded; Data holds the rest.
	b, _ := io.ReadAll(body)
	m.Body = string(b)
	return m
}
