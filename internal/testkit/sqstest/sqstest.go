// Package sqstest starts goaws, a local SQS-compatible server, inside the
// test binary, for the SQS transport's tests and harnesses; and, for the
// tests that need SQS's strictness (queue attributes, a receive's
// visibility), local-aws-sqs under Node.js (StartStrict, strict.go). goaws keeps
// its queues in package-level state, so a process has one server: Start
// returns the same one to every caller, and tests keep apart by queue
// prefix.
//
// goaws speaks SQS's Query protocol only; see the package documentation of
// the SQS transport for what it lacks. Two shims in front of it make it
// behave as SQS where herald depends on it: SendMessageBatch keeps each
// entry's attributes and delay (batch.go), and ReceiveMessage honours the
// receive's visibility timeout, counts receipts and, on a FIFO queue,
// keeps each group's order (fifo.go).
package sqstest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app"
	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/router"
	log "github.com/sirupsen/logrus"
)

// Region is the region every test configuration names.
const Region = "us-east-1"

// Server is the in-process goaws.
type Server struct {
	addr string

	mu     sync.Mutex
	srv    *http.Server
	refuse string
}

var (
	once   sync.Once
	shared *Server
	errs   error
)

// Start returns the process's goaws, starting it on a free loopback port
// on first use. It fails the test when the server cannot start: the server
// is the test's own, so there is nothing to skip for.
//
// It also makes the AWS SDK's default chain find static test credentials
// (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, unless set) and never ask
// an instance metadata service, so that a configuration with Endpoint set
// works as a deployment's would.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Launch()
	if err != nil {
		t.Fatalf("start goaws: %v", err)
	}
	return s
}

// Launch is Start for a harness that is not a test (herald-chaos).
func Launch() (*Server, error) {
	once.Do(func() { shared, errs = start() })
	return shared, errs
}

// Credentials are the environment the AWS SDK's default chain of a herald
// process needs to reach the server: static test credentials and no
// instance metadata service.
func Credentials() map[string]string {
	return map[string]string{
		"AWS_ACCESS_KEY_ID":           "herald-test",
		"AWS_SECRET_ACCESS_KEY":       "herald-test-secret",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	}
}

// ExpireInFlight makes every message of a queue that a consumer holds
// visible again at once, as if its visibility timeout had run out, and
// returns how many it released.
func ExpireInFlight(queue string) int {
	app.SyncQueues.Lock()
	defer app.SyncQueues.Unlock()
	q, ok := app.SyncQueues.Queues[queue]
	if !ok {
		return 0
	}
	n := 0
	for i := range q.Messages {
		if q.Messages[i].ReceiptHandle != "" {
			q.UnlockGroup(q.Messages[i].GroupID)
			q.Messages[i].ReceiptHandle = ""
			n++
		}
	}
	return n
}

var (
	credOnce sync.Once
	credErr  error
)

// setCredentials sets Credentials in the process's environment where
// unset, once.
func setCredentials() error {
	credOnce.Do(func() {
		for k, v := range Credentials() {
			if os.Getenv(k) == "" {
				if credErr = os.Setenv(k, v); credErr != nil {
					return
				}
			}
		}
	})
	return credErr
}

func start() (*Server, error) {
	if err := setCredentials(); err != nil {
		return nil, err
	}
	log.SetOutput(io.Discard)
	log.SetLevel(log.ErrorLevel)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(l.Addr().String())
	app.CurrentEnvironment = app.Environment{
		Host:      host,
		Port:      port,
		Region:    "",
		AccountID: "100010001000",
		QueueAttributeDefaults: app.EnvQueueAttributes{
			VisibilityTimeout:  30,
			MaximumMessageSize: 262144,
		},
	}
	app.SyncQueues.Lock()
	if app.SyncQueues.Queues == nil {
		app.SyncQueues.Queues = map[string]*app.Queue{}
	}
	app.SyncQueues.Unlock()
	go gosqs.PeriodicTasks(100*time.Millisecond, make(chan struct{}))
	s := &Server{addr: l.Addr().String()}
	s.serve(l)
	return s, nil
}

func (s *Server) serve(l net.Listener) {
	srv := &http.Server{Handler: mapGuard(s.batchShim(s.receiveShim(router.New()))), ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// queuesMu guards goaws's map of queues where goaws itself does not:
// v0.4.5's SendMessage (and others) read app.SyncQueues.Queues without its
// lock, and a CreateQueue or DeleteQueue beside them ended a test run with
// "fatal error: concurrent map read and map write". It is one for the
// process, as goaws's state is.
var queuesMu sync.RWMutex

// mapGuard holds queuesMu for writing around the requests that add or
// remove queues, and for reading around the others, but ReceiveMessage:
// a long poll would hold a CreateQueue for its whole wait, and goaws reads
// the map under its own lock there.
func mapGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			next.ServeHTTP(w, r)
			return
		}
		switch r.Form.Get("Action") {
		case "CreateQueue", "DeleteQueue":
			queuesMu.Lock()
			defer queuesMu.Unlock()
		case "ReceiveMessage":
		default:
			queuesMu.RLock()
			defer queuesMu.RUnlock()
		}
		next.ServeHTTP(w, r)
	})
}

// shim answers the requests of action (the form's Action) with serve, in
// goaws's stead, and hands every other request on to next.
func shim(action string, next http.Handler, serve http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Form.Get("Action") != action {
			next.ServeHTTP(w, r)
			return
		}
		serve(w, r)
	})
}

// URL is the server's endpoint, for Config.Endpoint.
func (s *Server) URL() string { return "http://" + s.addr }

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// BrokerURL is an HERALD_BROKER_URL for queues named after prefix.
func (s *Server) BrokerURL(prefix string, fifo bool) string {
	u := "sqs://" + Region + "/" + prefix + "?endpoint=" + s.URL()
	if fifo {
		u += "&fifo=true"
	}
	return u
}

// Stop closes the listener and every connection: SQS is unreachable until
// Resume. The queues and their messages stay (SQS itself never loses them
// in an outage).
func (s *Server) Stop() error {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Close()
}

// Resume listens again on the same address.
func (s *Server) Resume() error {
	var l net.Listener
	var err error
	// The port was just released; another process may race for it.
	for range 50 {
		l, err = net.Listen("tcp", s.addr)
		if err == nil {
			s.serve(l)
			return nil
		}
		time.Sleep(20 * time.Millisecond) // waiting for the kernel to free the port; no state to poll
	}
	return fmt.Errorf("listen on %s again: %w", s.addr, err)
}

// Prefix returns a queue prefix no other test uses.
func Prefix(t testing.TB) string {
	t.Helper()
	n := counter.Add()
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "t" + strconv.Itoa(os.Getpid()%100000) + "-" + strconv.Itoa(n) + "-" + strings.Trim(name, "-")
}

type atomicCounter struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCounter) Add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

var counter atomicCounter

// Queue reports how many messages a queue holds (visible or not), read from
// goaws's own state.
func Queue(name string) (n int, ok bool) {
	app.SyncQueues.RLock()
	defer app.SyncQueues.RUnlock()
	q, ok := app.SyncQueues.Queues[name]
	if !ok {
		return 0, false
	}
	return len(q.Messages), true
}
