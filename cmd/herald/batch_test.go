package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeBatchDeliveredOnce: on the embedded default (herald serve, a
// SQLite file, the outbox table, mail to herald.mbox), one batch of 200
// emails and webhooks, with one bad item, answers 207 in order, and every
// created notification is delivered exactly once: each email once in the
// mbox, each webhook once at the receiver, every one "sent".
func TestServeBatchDeliveredOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hooks := map[string]int{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		hooks[r.Header.Get("webhook-id")]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	dir := t.TempDir()
	addr := freeAddr(t)
	p := startHerald(t, dir, map[string]string{
		"HERALD_HTTP_ADDR":      addr,
		"HERALD_WEBHOOK_SECRET": "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
		"HERALD_WEBHOOK_ALLOW":  "127.0.0.0/8",
	}, "serve")
	api := client{base: "http://" + addr}
	waitHTTP(t, api.base+"/healthz")

	const n, bad = 200, 58
	items := make([]string, n)
	for i := range items {
		switch {
		case i == bad:
			items[i] = `{"user_id":"u","channel":"email","subject":"no recipient","body":"b"}`
		case i%2 == 0:
			items[i] = fmt.Sprintf(`{"user_id":"u-%d","channel":"email","to":"u%d@example.com","subject":"Batch %d","body":"Hello %d"}`, i, i, i, i)
		default:
			items[i] = fmt.Sprintf(`{"user_id":"u-%d","channel":"webhook","to":%q,"body":{"item":%d},"idempotency_key":"hook-%d"}`, i, receiver.URL+"/hooks", i, i)
		}
	}
	resp, err := http.Post(api.base+"/notifications/batch", "application/json", strings.NewReader(`{"notifications":[`+strings.Join(items, ",")+`]}`))
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusMultiStatus, resp.StatusCode, string(raw))
	var reply struct {
		Results []struct {
			Status int
			ID     string
			Error  struct{ Field string }
		}
	}
	require.NoError(t, json.Unmarshal(raw, &reply))
	require.Len(t, reply.Results, n)
	emails, webhooks := map[string]bool{}, map[string]bool{}
	var prev int64
	for i, r := range reply.Results {
		if i == bad {
			// No to and no recipient record to take it from: 422 on
			// user_id, as a single create answers.
			require.Equal(t, 422, r.Status)
			require.Equal(t, fmt.Sprintf("notifications[%d].user_id", bad), r.Error.Field)
			continue
		}
		require.Equal(t, 201, r.Status, "item %d", i)
		id, err := strconv.ParseInt(r.ID, 10, 64)
		require.NoError(t, err)
		require.Greater(t, id, prev, "ids follow the items' order")
		prev = id
		if i%2 == 0 {
			emails[r.ID] = true
		} else {
			webhooks[r.ID] = true
		}
	}
	require.Len(t, emails, n/2-1)
	require.Len(t, webhooks, n/2)

	mbox := filepath.Join(dir, "herald.mbox")
	require.Eventually(t, func() bool {
		for id := range emails {
			if api.get(t, id).Status != "sent" {
				return false
			}
		}
		for id := range webhooks {
			if api.get(t, id).Status != "sent" {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "every item sent:\n%s", p.LogTail(30))
	b, err := os.ReadFile(mbox)
	require.NoError(t, err)
	require.Equal(t, len(emails), strings.Count(string(b), "\nMessage-ID: <"), "one email per notification")
	for id := range emails {
		require.Equal(t, 1, strings.Count(string(b), "Message-ID: <"+id+"@localhost>"), "email %s once", id)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, hooks, len(webhooks))
	for id := range webhooks {
		require.Equal(t, 1, hooks["msg_"+id], "webhook %s once", id)
	}
}
