package webhook_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/testkit/sendertest"
)

// Test secrets: whsec_ + base64 of a 32-byte key.
var (
	testKey     = []byte("0123456789abcdef0123456789abcdef")
	otherKey    = []byte("fedcba9876543210fedcba9876543210")
	testSecret  = "whsec_" + base64.StdEncoding.EncodeToString(testKey)
	otherSecret = "whsec_" + base64.StdEncoding.EncodeToString(otherKey)
)

// loopback opens the test receivers' addresses, which the guard refuses
// by default.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// newSender builds a Sender that may reach loopback receivers.
func newSender(t *testing.T, cfg webhook.Config) *webhook.Sender {
	t.Helper()
	if cfg.Secret == "" {
		cfg.Secret = testSecret
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	s, err := webhook.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// request is one request as a receiver saw it.
type request struct {
	Header http.Header
	Body   []byte
}

// receiver is a webhook endpoint on loopback that records what reaches it
// and answers as its behaviour says; it is also the conformance suite's
// peer.
type receiver struct {
	srv     *httptest.Server
	release chan struct{} // closed at cleanup: a hanging handler returns

	mu         sync.Mutex
	behaviour  sendertest.Behaviour
	retryAfter time.Duration
	handler    http.HandlerFunc // when set, answers instead of behaviour
	got        []request
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{release: make(chan struct{}), retryAfter: 7 * time.Second}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	t.Cleanup(func() { close(r.release) }) // runs first: LIFO
	return r
}

// answer makes the receiver answer with h from now on.
func (r *receiver) answer(h http.HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handler = h
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.got = append(r.got, request{Header: req.Header.Clone(), Body: body})
	b, h, after := r.behaviour, r.handler, r.retryAfter
	r.mu.Unlock()
	if h != nil {
		h(w, req)
		return
	}
	switch b {
	case sendertest.Accept:
		w.WriteHeader(http.StatusNoContent)
	case sendertest.Reject:
		http.Error(w, "endpoint removed", http.StatusGone)
	case sendertest.Fail:
		http.Error(w, "try again", http.StatusInternalServerError)
	case sendertest.Throttle:
		w.Header().Set("Retry-After", strconv.Itoa(int(after/time.Second)))
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case sendertest.Hang:
		select {
		case <-req.Context().Done():
		case <-r.release:
		}
	default:
		http.Error(w, "unexpected behaviour "+b.String(), http.StatusTeapot)
	}
}

// requests returns what reached the receiver.
func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.got...)
}

// url is the receiver's address with path.
func (r *receiver) url(path string) string { return r.srv.URL + path }

func (r *receiver) outgoing(id, path, body string) notify.Outgoing {
	return notify.Outgoing{NotificationID: id, UserID: "u1", Channel: "webhook", To: r.url(path), Body: body}
}

// The sendertest.Peer side.

func (r *receiver) Set(b sendertest.Behaviour) {
	r.mu.Lock()
	r.behaviour = b
	r.mu.Unlock()
	if b == sendertest.Down {
		// Nothing listens on the port any more: connection refused.
		r.srv.Close()
	}
}

func (r *receiver) Sender(t *testing.T, timeout time.Duration) sendertest.Sender {
	return newSender(t, webhook.Config{Allow: loopback, Timeout: timeout})
}

func (r *receiver) Outgoing(id string) notify.Outgoing {
	return r.outgoing(id, "/hooks/"+id, `{"event":"conformance","id":"`+id+`"}`)
}

func (r *receiver) Received() []sendertest.Received {
	var out []sendertest.Received
	for _, q := range r.requests() {
		out = append(out, sendertest.Received{Identity: q.Header.Get("webhook-id"), Body: string(q.Body)})
	}
	return out
}
