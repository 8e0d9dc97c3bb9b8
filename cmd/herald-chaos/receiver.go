package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/webhooktest"
)

// receiver is the webhook endpoint of the run: an HTTP server in the
// harness's process that checks each request's Standard Webhooks signature
// with the harness's own HMAC code (not herald's), and records the
// deliveries it answered 2xx by webhook-id. For a stretch of the run (the
// webhook-fail fault) it fails instead, in turn: a connection dropped
// after the request was read, 500, and 503 with Retry-After.
type receiver struct {
	key    []byte
	secret string // HERALD_WEBHOOK_SECRET: whsec_ and the key in base64
	ln     net.Listener
	srv    *http.Server

	mu sync.Mutex
	// got counts the 2xx answers by webhook-id.
	got map[string]int
	// index is the load's index each webhook-id's body named.
	index map[string]int
	// badSignature and badBody count the requests refused (401, 400).
	badSignature, badBody int
	failing               bool
	// failed counts the failures answered while failing, by kind.
	failed map[string]int
	turn   int
}

// Webhook failure kinds, in the order the failing receiver takes them.
const (
	fail503  = "503+Retry-After"
	fail500  = "500"
	failDrop = "dropped"
)

var failKinds = []string{failDrop, fail500, fail503}

func startReceiver() (*receiver, error) {
	secret, key := webhooktest.NewSecret()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	r := &receiver{
		key: key, secret: secret, ln: ln,
		got: map[string]int{}, index: map[string]int{}, failed: map[string]int{},
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// url is the endpoint's address, in the webhook notifications' "to".
func (r *receiver) url(runID string) string {
	return "http://" + r.ln.Addr().String() + "/hooks/" + runID
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// setFailing starts or ends the failing stretch.
func (r *receiver) setFailing(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing = on
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
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
	got, index := make(map[string]int, len(r.got)), make(map[string]int, len(r.index))
	for k, v := range r.got {
		got[k] = v
	}
	for k, v := range r.index {
		index[k] = v
	}
	return got, index
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
	out := make(map[string]int, len(r.failed))
	for k, v := range r.failed {
		out[k] = v
	}
	return out
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
