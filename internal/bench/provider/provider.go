// Package provider is the provider a webhook or telegram bench sends to
// (Server): an HTTP server on loopback that checks and counts what herald
// sends. It is a package of its own so that herald bench's measuring code
// links no test helper; this one links the Standard Webhooks verifier.
package provider

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/testkit/webhooktest"
)

// Paths a Server serves.
const (
	// hookPath takes herald's webhooks: checked, counted, answered 204.
	hookPath = "/hook"
	// rawPath takes the raw POST ceiling's requests: answered 204 after the
	// same latency, neither checked nor counted.
	rawPath = "/raw"
	// botPrefix begins the Bot API's paths: /bot<token>/<method>.
	botPrefix = "/bot"
)

// maxBody bounds the body a Server reads.
const maxBody = 1 << 20

// Config configures a Server.
type Config struct {
	// Latency is how long the receiver works on each request before it
	// answers, as a real endpoint does. Default 0 (at once).
	Latency time.Duration
	// Secret is the Standard Webhooks secret (whsec_<base64 key>) every
	// webhook must be signed with; required to take webhooks.
	Secret string
	// BotToken is the token of the Bot API the receiver speaks at
	// /bot<token>/; empty: no Bot API.
	BotToken string
}

// Server is the provider a webhook or telegram bench sends to: an HTTP
// server on loopback that answers after Config.Latency. It takes
// webhooks at WebhookURL, checks each one's Standard Webhooks signature
// (with its own code, not herald's) and counts them by notification; it
// speaks the Bot API's sendMessage and getMe at BotAPI; and it answers the
// raw POST ceiling at RawURL. It is safe for concurrent use.
type Server struct {
	rcfg Config
	key  []byte
	srv  *http.Server
	base string
	done chan struct{}

	mu sync.Mutex
	// byID counts the webhooks received by notification id.
	byID map[string]int
	// bad counts the webhooks whose signature did not verify; badWhy is
	// the first one's reason.
	bad    int
	badWhy string
	// messages counts the Bot API messages received, by text.
	messages map[string]int
	nextMsg  int64
}

// NewWebhookSecret returns a fresh Standard Webhooks secret: whsec_ and
// the base64 of 32 random bytes.
func NewWebhookSecret() string {
	secret, _ := webhooktest.NewSecret()
	return secret
}

// New starts a Server on 127.0.0.1 at a free port.
func New(rc Config) (*Server, error) {
	if rc.Latency < 0 {
		return nil, fmt.Errorf("receiver: latency must not be negative, got %s", rc.Latency)
	}
	r := &Server{rcfg: rc, byID: map[string]int{}, messages: map[string]int{}, done: make(chan struct{})}
	if rc.Secret != "" {
		rest, ok := strings.CutPrefix(rc.Secret, "whsec_")
		key, err := base64.StdEncoding.DecodeString(rest)
		if !ok || err != nil || len(key) == 0 {
			return nil, errors.New("receiver: the secret must have the form whsec_<base64>")
		}
		r.key = key
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: listen: %w", err)
	}
	r.base = "http://" + ln.Addr().String()
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// WebhookURL is where herald's webhooks go.
func (r *Server) WebhookURL() string { return r.base + hookPath }

// RawURL is where the raw POST ceiling posts.
func (r *Server) RawURL() string { return r.base + rawPath }

// BotAPI is the Bot API base URL (HERALD_TELEGRAM_API).
func (r *Server) BotAPI() string { return r.base }

// Close stops the receiver at once.
func (r *Server) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}

// Received returns how many webhooks with a good signature were received,
// by notification id (webhook-id msg_<id>).
func (r *Server) Received() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.byID))
	for id, n := range r.byID {
		out[id] = n
	}
	return out
}

// Messages returns how many Bot API messages were received, and how many
// distinct texts they had.
func (r *Server) Messages() (total, distinct int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.messages {
		total += n
	}
	return total, len(r.messages)
}

// Reset forgets the webhooks and messages received so far (after a
// warm-up), but not a bad signature.
func (r *Server) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID, r.messages = map[string]int{}, map[string]int{}
}

// Check returns an error when a webhook came with a bad signature (it was
// answered 204 all the same, so that the run goes on and says so at the
// end rather than stalling on retries).
func (r *Server) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bad > 0 {
		return fmt.Errorf("receiver: %d webhooks failed the signature check, the first: %s", r.bad, r.badWhy)
	}
	return nil
}

func (r *Server) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	if r.rcfg.Latency > 0 {
		// The endpoint's own work.
		t := time.NewTimer(r.rcfg.Latency)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
			return
		}
	}
	switch {
	case req.URL.Path == rawPath:
		w.WriteHeader(http.StatusNoContent)
	case req.URL.Path == hookPath && r.key != nil:
		r.hook(w, req.Header, body)
	case r.rcfg.BotToken != "" && strings.HasPrefix(req.URL.Path, botPrefix):
		r.bot(w, req.URL.Path, body)
	default:
		http.NotFound(w, req)
	}
}

// hook takes one webhook: it verifies the signature and counts it.
func (r *Server) hook(w http.ResponseWriter, h http.Header, body []byte) {
	id := h.Get("webhook-id")
	err := webhooktest.Verify(r.key, h, body, time.Now())
	r.mu.Lock()
	if err != nil {
		r.bad++
		if r.badWhy == "" {
			r.badWhy = fmt.Sprintf("webhook-id %q: %v", id, err)
		}
	} else {
		r.byID[strings.TrimPrefix(id, "msg_")]++
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// bot answers the Bot API's getMe and sendMessage as Telegram does.
func (r *Server) bot(w http.ResponseWriter, path string, body []byte) {
	token, method, _ := strings.Cut(strings.TrimPrefix(path, botPrefix), "/")
	w.Header().Set("Content-Type", "application/json")
	if token != r.rcfg.BotToken {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"ok":false,"error_code":401,"description":"Unauthorized"}`)
		return
	}
	switch method {
	case "getMe":
		_, _ = io.WriteString(w, `{"ok":true,"result":{"id":1,"is_bot":true,"first_name":"herald bench","username":"herald_bench_bot"}}`)
	case "sendMessage":
		var m struct {
			ChatID json.RawMessage `json:"chat_id"`
			Text   string          `json:"text"`
		}
		if err := json.Unmarshal(body, &m); err != nil || len(m.ChatID) == 0 || m.Text == "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"ok":false,"error_code":400,"description":"Bad Request: message text is empty"}`)
			return
		}
		r.mu.Lock()
		r.messages[m.Text]++
		r.nextMsg++
		n := r.nextMsg
		r.mu.Unlock()
		text, _ := json.Marshal(m.Text)
		fmt.Fprintf(w, `{"ok":true,"result":{"message_id":%d,"date":%d,"chat":{"id":%s,"type":"private"},"text":%s}}`, n, time.Now().Unix(), m.ChatID, text)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"ok":false,"error_code":404,"description":"Not Found"}`)
	}
}
