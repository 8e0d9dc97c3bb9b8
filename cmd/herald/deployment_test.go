package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// deploymentStatus is the part of GET /status the test reads.
type deploymentStatus struct {
	Notifications struct {
		Pending       int64   `json:"pending"`
		OldestPending float64 `json:"oldest_pending_seconds"`
	} `json:"notifications"`
	Outbox struct {
		Unprocessed int64 `json:"unprocessed"`
	} `json:"outbox"`
	Queues []struct {
		Name      string `json:"name"`
		Role      string `json:"role"`
		Ready     int64  `json:"ready"`
		Consumers *int   `json:"consumers"`
	} `json:"queues"`
	Processes []struct {
		Roles   []string `json:"roles"`
		State   string   `json:"state"`
		Senders []struct {
			Channel string `json:"channel"`
			State   string `json:"state"`
		} `json:"senders"`
	} `json:"processes"`
}

// fetch GETs path and returns the status code and body.
func fetch(t *testing.T, c client, path string) (int, []byte) {
	t.Helper()
	resp, err := httpClient.Get(c.base + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

func getStatus(t *testing.T, c client) (deploymentStatus, bool) {
	t.Helper()
	var st deploymentStatus
	code, b := fetch(t, c, "/status")
	if code != http.StatusOK {
		return st, false
	}
	require.NoError(t, json.Unmarshal(b, &st), string(b))
	return st, true
}

// The production shape with no worker: herald api alone shows that three
// notifications wait (with their age) although the outbox is empty (the
// relay handed them to RabbitMQ), that the send queue holds them with no
// consumer, and that no worker runs; the console's overview says so in
// words. A worker then starts, shows up with its sender, and delivers.
func TestStatusShowsTheWholeDeployment(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	s.startAPI(nil)
	s.start("relay")
	var ids []string
	for _, to := range []string{"a@example.com", "b@example.com", "c@example.com"} {
		c := s.api.create(t, to, nil)
		require.Equal(t, http.StatusCreated, c.Status, c.Body)
		ids = append(ids, c.ID)
	}

	var st deploymentStatus
	require.Eventually(t, func() bool {
		var ok bool
		st, ok = getStatus(t, s.api)
		if !ok || st.Outbox.Unprocessed != 0 || st.Notifications.Pending != 3 {
			return false
		}
		for _, q := range st.Queues {
			if q.Role == "send" && q.Name == "notifications.send" {
				return q.Ready == 3
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "the relay hands the three to RabbitMQ; GET /status: %+v", st)
	require.Greater(t, st.Notifications.OldestPending, 0.0)
	// Two send queues: the normal one and the high-priority lane (issue
	// 34), which the three normal notifications did not reach.
	var sends []string
	for _, q := range st.Queues {
		if q.Role == "send" {
			sends = append(sends, q.Name)
			require.NotNil(t, q.Consumers)
			require.Zero(t, *q.Consumers, "no worker consumes")
			if q.Name == "notifications.send.high" {
				require.Zero(t, q.Ready, "normal notifications stay off the high lane")
			}
		}
	}
	require.ElementsMatch(t, []string{"notifications.send", "notifications.send.high"}, sends)
	roles := map[string]string{}
	for _, p := range st.Processes {
		roles[strings.Join(p.Roles, "+")] = p.State
	}
	require.Equal(t, map[string]string{"api": "live", "relay": "live"}, roles, "the api and the relay report themselves; no worker does")

	page := func() string {
		code, b := fetch(t, s.api, "/ui/overview")
		require.Equal(t, http.StatusOK, code, string(b))
		return string(b)
	}
	overview := page()
	require.Contains(t, overview, `<p class="big" id="pending">3</p>`)
	require.Contains(t, overview, "Nothing is being delivered: 3 notifications pending and no worker has reported in.")
	require.Regexp(t, `data-queue="notifications.send" data-role="send">.*class="ready">3<.*class="consumers">0<`, overview)

	// A worker starts: it reports itself with its sender, consumes, and
	// delivers.
	s.start("worker")
	require.Eventually(t, func() bool {
		st, ok := getStatus(t, s.api)
		if !ok {
			return false
		}
		for _, p := range st.Processes {
			if strings.Join(p.Roles, "+") == "worker" && p.State == "live" && len(p.Senders) == 1 &&
				p.Senders[0].Channel == "email" && p.Senders[0].State == "up" {
				return true
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "the worker shows up with its sender")
	for _, id := range ids {
		s.waitStatus(id, "sent", 30*time.Second)
	}
	require.Eventually(t, func() bool {
		st, ok := getStatus(t, s.api)
		return ok && st.Notifications.Pending == 0
	}, 10*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool {
		o := page()
		return strings.Contains(o, `<p class="big" id="pending">0</p>`) && !strings.Contains(o, "Nothing is being delivered") &&
			strings.Contains(o, `data-channel="email" data-up="true"`)
	}, 10*time.Second, 100*time.Millisecond, "the overview shows the worker and nothing pending")
}
