package telegram_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/telegram"
	"github.com/heraldhq/herald/internal/testkit/sendertest"
)

const testToken = "123456:AAE-secret-token-value"

// sendMessage is a sendMessage request as the Bot API reads it.
type sendMessage struct {
	ChatID json.RawMessage `json:"chat_id"`
	Text   string          `json:"text"`
}

// botAPI is a local server that speaks the Bot API's replies for one bot
// token: sendMessage and getMe. It is also the conformance suite's peer.
type botAPI struct {
	srv     *httptest.Server
	release chan struct{}

	mu        sync.Mutex
	behaviour sendertest.Behaviour
	status    int    // when not 0, answers sendMessage with this error
	desc      string // its description
	params    string // its parameters object, "" for none
	got       []sendMessage
	probes    int
}

func startBotAPI(t *testing.T) *botAPI {
	t.Helper()
	b := &botAPI{release: make(chan struct{})}
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.srv.Close)
	t.Cleanup(func() { close(b.release) })
	return b
}

func writeReply(w http.ResponseWriter, status int, v string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, v)
}

func apiError(w http.ResponseWriter, status int, desc, params string) {
	v := fmt.Sprintf(`{"ok":false,"error_code":%d,"description":%q`, status, desc)
	if params != "" {
		v += `,"parameters":` + params
	}
	writeReply(w, status, v+"}")
}

func (b *botAPI) serve(w http.ResponseWriter, r *http.Request) {
	method, ok := strings.CutPrefix(r.URL.Path, "/bot"+testToken+"/")
	if !ok {
		// What the Bot API answers a wrong token.
		apiError(w, http.StatusUnauthorized, "Unauthorized", "")
		return
	}
	switch method {
	case "getMe":
		b.mu.Lock()
		b.probes++
		b.mu.Unlock()
		writeReply(w, 200, `{"ok":true,"result":{"id":123456,"is_bot":true,"first_name":"herald","username":"herald_test_bot"}}`)
		return
	case "sendMessage":
	default:
		apiError(w, http.StatusNotFound, "Not Found", "")
		return
	}
	var m sendMessage
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		apiError(w, http.StatusBadRequest, "Bad Request: can't parse JSON", "")
		return
	}
	b.mu.Lock()
	b.got = append(b.got, m)
	beh, status, desc, params := b.behaviour, b.status, b.desc, b.params
	b.mu.Unlock()
	if status != 0 {
		apiError(w, status, desc, params)
		return
	}
	switch beh {
	case sendertest.Accept:
		writeReply(w, 200, fmt.Sprintf(`{"ok":true,"result":{"message_id":%d,"chat":{"id":1,"type":"private"},"date":%d,"text":%q}}`,
			len(b.got), time.Now().Unix(), m.Text))
	case sendertest.Reject:
		apiError(w, http.StatusForbidden, "Forbidden: bot was blocked by the user", "")
	case sendertest.Fail:
		apiError(w, http.StatusInternalServerError, "Internal Server Error", "")
	case sendertest.Throttle:
		apiError(w, http.StatusTooManyRequests, "Too Many Requests: retry after 7", `{"retry_after":7}`)
	case sendertest.Hang:
		select {
		case <-r.Context().Done():
		case <-b.release:
		}
	}
}

// fail makes sendMessage answer an error from now on.
func (b *botAPI) fail(status int, desc, params string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.status, b.desc, b.params = status, desc, params
}

func (b *botAPI) messages() []sendMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]sendMessage(nil), b.got...)
}

func newSender(t *testing.T, cfg telegram.Config) *telegram.Sender {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	s, err := telegram.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (b *botAPI) sender(t *testing.T) *telegram.Sender {
	return newSender(t, telegram.Config{APIBase: b.srv.URL, Timeout: 5 * time.Second})
}

func message(id, to, text string) notify.Outgoing {
	return notify.Outgoing{NotificationID: id, UserID: "u", Channel: "telegram", To: to, Body: text}
}

// The sendertest.Peer side.

func (b *botAPI) Set(beh sendertest.Behaviour) {
	b.mu.Lock()
	b.behaviour = beh
	b.mu.Unlock()
	if beh == sendertest.Down {
		b.srv.Close()
	}
}

func (b *botAPI) Sender(t *testing.T, timeout time.Duration) sendertest.Sender {
	return newSender(t, telegram.Config{APIBase: b.srv.URL, Timeout: timeout})
}

func (b *botAPI) Outgoing(id string) notify.Outgoing {
	return message(id, "-1001234567890", "conformance "+id)
}

func (b *botAPI) Received() []sendertest.Received {
	var out []sendertest.Received
	for _, m := range b.messages() {
		// sendMessage has no idempotency key: nothing to report.
		out = append(out, sendertest.Received{Body: m.Text})
	}
	return out
}
