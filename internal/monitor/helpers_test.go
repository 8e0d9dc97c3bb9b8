package monitor

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/testlog"
)

// logBuffer collects JSON log lines from concurrent writers.
type logBuffer struct{ testlog.Buffer }

func (b *logBuffer) records(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// botRequest is one request a fake Telegram Bot API received.
type botRequest struct {
	Method      string
	Path        string
	ContentType string
	ChatID      string `json:"chat_id"`
	Text        string `json:"text"`
}

// botServer is a local HTTP server standing in for the Telegram Bot API. It
// answers every request with status and records it.
type botServer struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []botRequest
	status int
}

func newBotServer(t testing.TB, status int) *botServer {
	t.Helper()
	s := &botServer{status: status}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		req := botRequest{Method: r.Method, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type")}
		_ = json.Unmarshal(raw, &req)
		s.mu.Lock()
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(s.status)
		if s.status == http.StatusOK {
			_, _ = io.WriteString(w, `{"ok":true,"result":{}}`)
		} else {
			_, _ = io.WriteString(w, `{"ok":false,"error_code":401,"description":"Unauthorized"}`)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *botServer) requests() []botRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]botRequest(nil), s.reqs...)
}
