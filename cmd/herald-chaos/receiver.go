package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/testkit/webhooktest"
)

// receiver is the webhook side of the run: endpoints on loopback ports of
// their own (herald pauses a destination by scheme, host and port, so each
// is a destination of its own to it), served by one HTTP handler in the
// harness's process that checks each request's Standard Webhooks signature
// with the harness's own HMAC code (not herald's), and records the
// deliveries it answered 2xx by webhook-id and by endpoint. For a stretch
// of the run (the webhook-fail fault) it fails instead, in turn: a
// connection dropped after the request was read, 500, and 503 with
// Retry-After. One endpoint, the victim, can be black-holed (the
// endpoint-blackhole fault).
type receiver struct {
	key    []byte
	secret string // HERALD_WEBHOOK_SECRET: whsec_ and the key in base64
	eps    []*endpoint

	mu sync.Mutex
	// got counts the 2xx answers by webhook-id.
	got map[string]int
	// index is the load's index each webhook-id's body named.
	index map[string]int
	// byEndpoint counts the 2xx answers by endpoint.
	byEndpoint []int
	// ofLoad counts the 2xx answers to the load's webhooks (not the
	// faults' own).
	ofLoad int
	// badSignature and badBody count the requests refused (401, 400).
	badSignature, badBody int
	failing               bool
	// failed counts the failures answered while failing, by kind.
	failed map[string]int
	turn   int
}

// endpoint is one of the receiver's ports.
type endpoint struct {
	hole *hole
	srv  *http.Server
	// ln serves the port; nil while it is black-holed.
	ln net.Listener
}

// victim is the endpoint the endpoint-blackhole fault black-holes. It
// answers every request with Connection: close, so that no kept
// connection of herald's outlives the start of the hole.
const victim = 0

// Webhook failure kinds, in the order the failing receiver takes them.
const (
	fail503  = "503+Retry-After"
	fail500  = "500"
	failDrop = "dropped"
)

var failKinds = []string{failDrop, fail500, fail503}

// startReceiver starts a receiver with n endpoints.
func startReceiver(n int) (*receiver, error) {
	secret, key := webhooktest.NewSecret()
	r := &receiver{
		key: key, secret: secret,
		got: map[string]int{}, index: map[string]int{}, failed: map[string]int{},
		byEndpoint: make([]int, n),
	}
	for k := range n {
		hl, ln, err := listenHole()
		if err != nil {
			r.close()
			return nil, fmt.Errorf("webhook receiver: %w", err)
		}
		ep := &endpoint{hole: hl, ln: ln, srv: &http.Server{
			Handler:           http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, k) }),
			ReadHeaderTimeout: 10 * time.Second,
		}}
		if k == victim {
			ep.srv.SetKeepAlivesEnabled(false)
		}
		r.eps = append(r.eps, ep)
		go func() { _ = ep.srv.Serve(ln) }()
	}
	return r, nil
}

// urls are the endpoints' addresses, in the webhook notifications' "to",
// endpoint k at index k.
func (r *receiver) urls(runID string) []string {
	out := make([]string, len(r.eps))
	for k, ep := range r.eps {
		out[k] = "http://" + ep.hole.addr + "/hooks/" + runID
	}
	return out
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ep := range r.eps {
		_ = ep.srv.Shutdown(ctx)
		ep.hole.close()
	}
}

// blackhole makes endpoint k's connects hang (see hole). The endpoint
// keeps no connection open (the victim answers with Connection: close),
// so every request after this one needs a connect. It returns how many
// connects of herald's were caught in the accept queue as it closed.
func (r *receiver) blackhole(k int) (int, error) {
	ep := r.eps[k]
	if ep.ln == nil {
		return 0, fmt.Errorf("endpoint %d is black-holed already", k)
	}
	caught, err := ep.hole.swallow(ep.ln)
	ep.ln = nil
	return caught, err
}

// restore ends endpoint k's black hole.
func (r *receiver) restore(k int) error {
	ep := r.eps[k]
	if ep.ln != nil {
		return nil
	}
	ln, err := ep.hole.open()
	if err != nil {
		return err
	}
	ep.ln = ln
	go func() { _ = ep.srv.Serve(ln) }()
	return nil
}

// setFailing starts or ends the failing stretch.
func (r *receiver) setFailing(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing = on
}

// serve answers a request to endpoint k.
func (r *receiver) serve(w http.ResponseWriter, req *http.Request, k int) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		// A request cut by the sender: nothing was delivered.
		return
	}
	id := req.Header.Get("webhook-id")
	if webhooktest.Verify(r.key, req.Header, body, time.Now()) != nil {
		r.mu.Lock()
		r.badSignature++
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var b struct {
		I *int `json:"i"`
	}
	if json.Unmarshal(body, &b) != nil || b.I == nil {
		r.mu.Lock()
		r.badBody++
		r.mu.Unlock()
		http.Error(w, "not a chaos body", http.StatusBadRequest)
		return
	}

	r.mu.Lock()
	kind := ""
	if r.failing {
		kind = failKinds[r.turn%len(failKinds)]
		r.turn++
		r.failed[kind]++
	} else {
		r.got[id]++
		r.index[id] = *b.I
		r.byEndpoint[k]++
		if *b.I < extraBase {
			r.ofLoad++
		}
	}
	r.mu.Unlock()
	switch kind {
	case "":
		w.WriteHeader(http.StatusNoContent)
	case fail503:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "chaos: busy", http.StatusServiceUnavailable)
	case fail500:
		http.Error(w, "chaos: broken", http.StatusInternalServerError)
	case failDrop:
		// The request was read; the sender never gets an answer.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
}

// deliveries returns the 2xx answers by webhook-id and the load index each
// one's body named.
func (r *receiver) deliveries() (map[string]int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.got), maps.Clone(r.index)
}

// count is the number of 2xx answers so far.
func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.got {
		n += c
	}
	return n
}

// delivered returns the 2xx answers of endpoint k so far and those of all
// the others.
func (r *receiver) delivered(k int) (at, others int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for j, c := range r.byEndpoint {
		if j == k {
			at += c
		} else {
			others += c
		}
	}
	return at, others
}

// loadCount is the number of 2xx answers to the load's webhooks so far.
func (r *receiver) loadCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ofLoad
}

// refused returns the requests refused for a bad signature or body.
func (r *receiver) refused() (badSignature, badBody int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.badSignature, r.badBody
}

// failures returns the failures answered so far, by kind.
func (r *receiver) failures() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.failed)
}

// webhookFail makes the receiver fail every request for faultPause (a
// dropped connection, 500, 503 with Retry-After, in turn), then recover.
// Every webhook in that time is retried (a 503 with Retry-After throttles
// the endpoint without spending an attempt); none may be lost, none
// dead-lettered: the stretch is shorter than a notification's
// HERALD_MAX_RETRIES+1 attempts, HERALD_RETRY_DELAY apart.
func (h *harness) webhookFail(ctx context.Context) (string, int, error) {
	if h.hooks == nil {
		return "", 0, errors.New("no webhook receiver")
	}
	before := h.hooks.failures()
	h.hooks.setFailing(true)
	err := sleep(ctx, faultPause)
	h.hooks.setFailing(false)
	after := h.hooks.failures()
	var parts []string
	for _, k := range failKinds {
		parts = append(parts, fmt.Sprintf("%d %s", after[k]-before[k], k))
	}
	return fmt.Sprintf("receiver failing for %s: %s", faultPause, strings.Join(parts, ", ")), 0, err
}
