// Package smtptest runs a real SMTP server in-process, on a loopback port, for
// tests, herald bench and the chaos harness: it records every message it
// accepts, and can be made to behave as real providers do: STARTTLS or
// implicit TLS with a certificate from a CA made at run time, AUTH, a slow
// DATA, a hang, scripted refusals at any step, greylisting, a strict
// server that refuses a second EHLO in a session. It can also
// capture the bytes on the wire, to prove what crossed it in clear.
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
	// UTF8 is true when MAIL FROM carried the SMTPUTF8 parameter.
	UTF8 bool
}

// Option configures a Server.
type Option func(*Server)

// WithAuth makes the server advertise AUTH PLAIN and LOGIN and require it
// before MAIL: only user and pass are accepted. Without WithRequireTLS the
// server accepts AUTH on a connection in clear too, as a careless server
// would: a client must refuse that itself.
func WithAuth(user, pass string) Option {
	return func(s *Server) {
		s.user, s.pass, s.auth = user, pass, true
	}
}

// WithAuthMechanisms restricts the AUTH mechanisms offered (sasl.Plain,
// sasl.Login) to mechs, in that order.
func WithAuthMechanisms(mechs ...string) Option {
	return func(s *Server) { s.mechs = mechs }
}

// WithTLS makes the server speak implicit TLS (smtps://) with cfg, which must
// hold a certificate (CA.ServerTLS makes one).
func WithTLS(cfg *tls.Config) Option {
	return func(s *Server) { s.tlsConfig = cfg }
}

// WithStartTLS makes the server offer STARTTLS with cfg, which must hold a
// certificate (CA.ServerTLS makes one). The URL stays smtp://.
func WithStartTLS(cfg *tls.Config) Option {
	return func(s *Server) { s.startTLS = cfg }
}

// WithRequireTLS makes the server refuse MAIL before STARTTLS with 530
// "Must issue a STARTTLS command first", and offer and take AUTH only over
// TLS, as providers do on port 587. It goes with WithStartTLS.
func WithRequireTLS() Option {
	return func(s *Server) { s.requireTLS = true }
}

// WithDataLatency makes the server answer each DATA d after the message has
// arrived, as a provider that scans and stores it first does.
func WithDataLatency(d time.Duration) Option {
	return func(s *Server) { s.latency = d }
}

// WithWireCapture records every byte of every connection, both ways, as it
// crossed the wire (see Wire). Off by default: a long run would keep every
// message twice.
func WithWireCapture() Option {
	return func(s *Server) { s.captureWire = true }
}

// WithSMTPUTF8 makes the server offer SMTPUTF8 (RFC 6531): only then may a
// client send an address with a non-ASCII local part.
func WithSMTPUTF8() Option {
	return func(s *Server) { s.smtpUTF8 = true }
}

// WithAddr makes the server listen on addr (host:port) instead of a free
// port on 127.0.0.1: a test that stops a server and later starts another
// where the first one was, as a provider that went down and came back.
func WithAddr(addr string) Option {
	return func(s *Server) { s.addr = addr }
}

// Step is a point of the SMTP dialogue a reply can be scripted at (FailAt).
type Step int

// The steps FailAt scripts.
const (
	// StepGreeting is the server's greeting: the connection is answered
	// with the reply and closed, as a server that is down for maintenance
	// (421) does.
	StepGreeting Step = iota
	// StepHello is the reply to EHLO (and HELO).
	StepHello
	// StepAuth is the reply to AUTH, whatever the credentials.
	StepAuth
	// StepMail is the reply to MAIL FROM.
	StepMail
	// StepRcpt is the reply to RCPT TO (what Fail scripts).
	StepRcpt
	// StepData is the reply after the message data.
	StepData
)

// reply is a scripted reply; code 0 means normal service.
type reply struct {
	code int
	msg  string
}

func (r reply) err() error {
	return &smtp.SMTPError{Code: r.code, EnhancedCode: smtp.EnhancedCode{r.code / 100, 0, 0}, Message: r.msg}
}

// Server is a running SMTP server. Its methods are safe for concurrent use.
type Server struct {
	srv      *smtp.Server
	ln       net.Listener  // the TCP listener
	pending  chan net.Conn // accepted connections for go-smtp
	stop     chan struct{} // closed when the server is closing
	stopOnce sync.Once
	loopDone chan struct{} // closed when the accept loop has returned
	done     chan struct{} // closed when Serve has returned

	auth        bool
	user, pass  string
	mechs       []string
	tlsConfig   *tls.Config // implicit TLS
	startTLS    *tls.Config
	requireTLS  bool
	captureWire bool
	smtpUTF8    bool
	strictHello bool
	addr        string // where to listen; "" picks a free loopback port

	mu        sync.Mutex
	messages  []Message
	received  []Message // every message whose data arrived, accepted or not
	attempts  int       // MAIL accepted
	mails     int       // MAIL received, refused or not
	auths     int       // AUTH received
	fail      map[Step]reply
	greylist  int
	greyTries map[string]int
	latency   time.Duration
	dropFor   func(rcpt string) bool // DropAfterData's predicate
	drops     int                    // connections dropped after DATA
	hung      chan struct{}          // non-nil while hung; closed when released
	held      []net.Conn             // connections accepted while hung
	closed    bool
	// conns are the open client connections; accepted counts every one
	// ever accepted and peak the most open at once.
	conns    map[*wireConn]struct{}
	accepted int
	peak     int
	wires    []*bytes.Buffer
	// refusedHellos counts the hellos WithStrictHello refused.
	refusedHellos int
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

// New starts a server on 127.0.0.1 on a free port (or WithAddr's). Close
// stops it.
func New(opts ...Option) (*Server, error) {
	s := &Server{
		pending:   make(chan net.Conn),
		stop:      make(chan struct{}),
		loopDone:  make(chan struct{}),
		done:      make(chan struct{}),
		mechs:     []string{sasl.Plain, sasl.Login},
		fail:      map[Step]reply{},
		greyTries: map[string]int{},
		conns:     map[*wireConn]struct{}{},
	}
	for _, opt := range opts {
		opt(s)
	}
	if s.requireTLS && s.startTLS == nil {
		return nil, fmt.Errorf("WithRequireTLS needs WithStartTLS")
	}
	if s.strictHello && s.tlsConfig != nil {
		return nil, fmt.Errorf("WithStrictHello watches the dialogue in clear, which WithTLS has none of")
	}
	addr := s.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s.ln = ln
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		s.mu.Lock()
		r := s.fail[StepHello]
		s.mu.Unlock()
		if r.code != 0 {
			return nil, r.err()
		}
		return &session{s: s, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout = 30 * time.Second
	srv.WriteTimeout = 30 * time.Second
	srv.MaxMessageBytes = 16 << 20
	srv.MaxRecipients = 100
	srv.TLSConfig = s.startTLS
	srv.EnableSMTPUTF8 = s.smtpUTF8
	// A careless server takes credentials in clear; a client must not
	// offer them. WithRequireTLS makes it a careful one.
	srv.AllowInsecureAuth = !s.requireTLS
	srv.ErrorLog = log.New(io.Discard, "", 0)
	s.srv = srv
	var served net.Listener = fakeListener{s: s, addr: ln.Addr()}
	if s.tlsConfig != nil {
		served = tls.NewListener(served, s.tlsConfig)
	}
	if s.strictHello {
		served = strictListener{Listener: served, s: s}
	}
	go s.acceptLoop()
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
	// here as well makes sure Serve and the accept loop return.
	s.stopOnce.Do(func() { close(s.stop) })
	_ = s.ln.Close()
	<-s.loopDone
	<-s.done
	s.DropConnections()
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

// Received returns a copy of every message whose data reached the server
// so far, in order, whatever the server answered (or did not answer) to
// it: the ones it refused, dropped or was slow to take included.
func (s *Server) Received() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.received...)
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
// accepted: over TLS and authenticated where required), failed ones
// included.
func (s *Server) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// MailCommands returns the number of MAIL FROM commands received, refused
// ones included: zero means no client even tried to hand over a message.
func (s *Server) MailCommands() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mails
}

// AuthAttempts returns the number of AUTH commands the server took up
// (over TLS only WithRequireTLS), failed ones included.
func (s *Server) AuthAttempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.auths
}

// Fail makes every following transaction fail at RCPT TO with reply code
// (a 4xx or 5xx) and msg, until Fail(0, "") restores normal service. It is
// FailAt(StepRcpt, code, msg).
func (s *Server) Fail(code int, msg string) { s.FailAt(StepRcpt, code, msg) }

// FailAt makes the server answer step with reply code and msg from now on,
// until FailAt(step, 0, "") restores normal service. StepHello applies to
// sessions greeted from now on (and to the EHLO after STARTTLS).
func (s *Server) FailAt(step Step, code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == 0 {
		delete(s.fail, step)
		return
	}
	s.fail[step] = reply{code: code, msg: msg}
}

// Greylist makes the server answer the first n RCPT TO of each recipient
// from now on with 451 4.7.1, as a greylisting server does for a sender it
// does not know yet; the n+1-th try passes. Greylist(0) ends it.
func (s *Server) Greylist(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.greylist = n
	s.greyTries = map[string]int{}
}

// DropAfterData makes the server close the connection, with no reply, once
// the data of a transaction to a recipient for which drop returns true has
// arrived, as a server that crashes on one message does; the message is not
// accepted. DropAfterData(nil) ends it.
func (s *Server) DropAfterData(drop func(rcpt string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropFor = drop
}

// Drops returns the number of connections closed by DropAfterData.
func (s *Server) Drops() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drops
}

// SetDataLatency makes the server answer each DATA d after the message has
// arrived, from now on; 0 answers at once.
func (s *Server) SetDataLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// SetHang(true) makes the server stop answering, as a hung server does: new
// connections get no greeting, and MAIL, RCPT and DATA on open sessions get
// no reply. SetHang(false) answers again, the held connections and commands
// included.
func (s *Server) SetHang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case on && s.hung == nil:
		s.hung = make(chan struct{})
	case !on && s.hung != nil:
		close(s.hung)
		s.hung = nil
		for _, c := range s.held {
			go s.handOver(c)
		}
		s.held = nil
	}
}

// waitWhileHung blocks while the server is hung; it returns false when the
// server is closing.
func (s *Server) waitWhileHung() bool {
	s.mu.Lock()
	ch := s.hung
	s.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-s.stop:
		return false
	}
}

// Wire returns every byte captured WithWireCapture, both directions, one
// connection after another in the order they were accepted: what a
// passive observer of the network saw. Before STARTTLS that is the SMTP
// dialogue in clear, after it TLS records; nil without WithWireCapture.
func (s *Server) Wire() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []byte
	for _, w := range s.wires {
		out = append(out, w.Bytes()...)
	}
	return out
}

// errAuthRequired is RFC 4954's reply to MAIL before AUTH (go-smtp's own
// ErrAuthRequired answers 502).
var errAuthRequired = &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}

// errTLSRequired is RFC 3207's reply to a command the server takes over TLS
// only.
var errTLSRequired = &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Must issue a STARTTLS command first"}

// Connections returns the number of client connections (SMTP sessions)
// accepted so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// PeakConnections returns the most client connections that were open at
// once.
func (s *Server) PeakConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// DropConnections closes every open client connection, as a server that
// times out idle sessions would; the server keeps accepting new ones.
func (s *Server) DropConnections() {
	s.mu.Lock()
	conns := make([]*wireConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.held = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// session is one client connection (and a new one after STARTTLS).
type session struct {
	s      *Server
	conn   *smtp.Conn
	authed bool
	from   string
	to     []string
	utf8   bool
}

func (se *session) tls() bool {
	_, ok := se.conn.TLSConnectionState()
	return ok
}

func (se *session) AuthMechanisms() []string {
	if !se.s.auth {
		return nil
	}
	return se.s.mechs
}

func (se *session) Auth(mech string) (sasl.Server, error) {
	se.s.mu.Lock()
	se.s.auths++
	r := se.s.fail[StepAuth]
	se.s.mu.Unlock()
	offered := false
	for _, m := range se.AuthMechanisms() {
		offered = offered || m == mech
	}
	if !offered {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	check := func(user, pass string) error {
		if r.code != 0 {
			return r.err()
		}
		if user != se.s.user || pass != se.s.pass {
			return smtp.ErrAuthFailed
		}
		se.authed = true
		return nil
	}
	if mech == sasl.Login {
		return &loginServer{authenticate: check}, nil
	}
	return sasl.NewPlainServer(func(identity, user, pass string) error {
		if identity != "" && identity != user {
			return smtp.ErrAuthFailed
		}
		return check(user, pass)
	}), nil
}

func (se *session) Mail(from string, opts *smtp.MailOptions) error {
	if !se.s.waitWhileHung() {
		return errClosing
	}
	se.s.mu.Lock()
	defer se.s.mu.Unlock()
	se.s.mails++
	switch {
	case se.s.requireTLS && !se.tls():
		return errTLSRequired
	case se.s.auth && !se.authed:
		return errAuthRequired
	}
	if r := se.s.fail[StepMail]; r.code != 0 {
		return r.err()
	}
	se.s.attempts++
	se.from, se.to = from, nil
	se.utf8 = opts != nil && opts.UTF8
	return nil
}

// errClosing answers a command that was held when the server closed.
var errClosing = &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Server closing"}

func (se *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if !se.s.waitWhileHung() {
		return errClosing
	}
	se.s.mu.Lock()
	defer se.s.mu.Unlock()
	if se.s.greylist > 0 {
		se.s.greyTries[to]++
		if se.s.greyTries[to] <= se.s.greylist {
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 7, 1}, Message: "Greylisted, try again later"}
		}
	}
	if r := se.s.fail[StepRcpt]; r.code != 0 {
		return r.err()
	}
	se.to = append(se.to, to)
	return nil
}

func (se *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("read data: %w", err)
	}
	se.s.mu.Lock()
	se.s.received = append(se.s.received, parse(data))
	se.s.mu.Unlock()
	if !se.s.waitWhileHung() {
		return errClosing
	}
	se.s.mu.Lock()
	latency := se.s.latency
	se.s.mu.Unlock()
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-se.s.stop:
			t.Stop()
			return errClosing
		}
	}
	if se.dropped() {
		// No reply: the client sees the connection end.
		_ = se.conn.Conn().Close()
		return errClosing
	}
	se.s.mu.Lock()
	defer se.s.mu.Unlock()
	if r := se.s.fail[StepData]; r.code != 0 {
		return r.err()
	}
	m := parse(data)
	m.From = se.from
	m.To = append([]string(nil), se.to...)
	m.UTF8 = se.utf8
	se.s.messages = append(se.s.messages, m)
	return nil
}

// dropped reports (and counts) a transaction DropAfterData drops.
func (se *session) dropped() bool {
	se.s.mu.Lock()
	defer se.s.mu.Unlock()
	if se.s.dropFor == nil {
		return false
	}
	for _, to := range se.to {
		if se.s.dropFor(to) {
			se.s.drops++
			return true
		}
	}
	return false
}

func (se *session) Reset() { se.from, se.to = "", nil }

func (se *session) Logout() error { return nil }

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
