package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// Preferences are honoured end to end, on both shapes: a user's opt-out,
// by the API and by a signed link followed without the token, makes a
// create in that category end suppressed and never reach the SMTP server,
// while a required category and the other users' mail still arrive.
func TestPreferencesSuppress(t *testing.T) {
	onEachShape(t, preferencesSuppress)
}

func preferencesSuppress(t *testing.T, sh shape) {
	r := sh.start(t, map[string]string{
		"HERALD_API_TOKEN":           "tok",
		"HERALD_REQUIRED_CATEGORIES": "security",
		"HERALD_LINK_SECRET":         strings.Repeat("k", 40),
	})
	base := r.base

	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, b)
		var out map[string]any
		require.NoError(t, json.Unmarshal(b, &out))
		return out
	}
	create := func(user, cat string) map[string]any {
		t.Helper()
		return call("POST", "/notifications", `{"user_id":"`+user+`","channel":"email","to":"`+user+`@example.com","subject":"`+cat+`","body":"b","category":"`+cat+`"}`, 201)
	}
	call("PUT", "/recipients/u-1/preferences", `{"categories":{"news":{"email":false},"security":{"email":false}}}`, 422)
	call("PUT", "/recipients/u-1/preferences", `{"categories":{"news":{"email":false}}}`, 200)
	require.Equal(t, "suppressed", create("u-1", "news")["status"])
	require.Equal(t, "pending", create("u-1", "security")["status"])

	// A link followed by a plain client, without the token.
	link := call("POST", "/recipients/u-1/preferences/links", `{"category":"digest","channel":"email"}`, 201)["url"].(string)
	require.True(t, strings.HasPrefix(link, "/unsubscribe/"), link)
	forged := link[:len(link)-2] + "xx"
	resp, err := http.Post(base+forged, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 403, resp.StatusCode)
	require.Equal(t, "pending", create("u-1", "digest")["status"], "a forged link changes nothing")
	resp, err = http.Post(base+link, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 200, resp.StatusCode)
	sup := create("u-1", "digest")
	require.Equal(t, "suppressed", sup["status"])
	require.Equal(t, "pending", create("u-2", "digest")["status"], "another user's mail goes")

	// The three that went arrive; the suppressed ones never do.
	var subjects []string
	require.Eventually(t, func() bool {
		subjects = subjects[:0]
		for _, m := range r.smtp.Messages() {
			subjects = append(subjects, m.To[0]+" "+m.Subject)
		}
		return len(subjects) >= 3
	}, 30*time.Second, 20*time.Millisecond, "three emails arrive")
	require.ElementsMatch(t, []string{"u-1@example.com security", "u-1@example.com digest", "u-2@example.com digest"}, subjects)
	list := call("GET", "/notifications?status=suppressed", "", 200)
	require.Len(t, list["items"], 2)
	require.Equal(t, "suppressed", call("GET", "/notifications/"+sup["id"].(string), "", 200)["status"])
	// Nothing is left pending behind them: every created one settled.
	require.Eventually(t, func() bool {
		return len(call("GET", "/notifications?status=pending", "", 200)["items"].([]any)) == 0
	}, 30*time.Second, 20*time.Millisecond)
	require.Len(t, r.smtp.Messages(), 3, "no suppressed mail arrived late")
}

// One-click unsubscribe (RFC 8058) end to end, on both shapes: an email
// with a category arrives at a real SMTP server with the List-Unsubscribe
// URL herald rendered at create and List-Unsubscribe-Post; a plain HTTP client POSTs the one-click body to
// that URL, without the token, as a mailbox provider does; the next create
// in that category ends suppressed and never arrives. A required
// category's email carries no header.
func TestOneClickUnsubscribe(t *testing.T) {
	onEachShape(t, oneClickUnsubscribe)
}

func oneClickUnsubscribe(t *testing.T, sh shape) {
	addr := freeAddr(t)
	r := sh.start(t, map[string]string{
		"HERALD_HTTP_ADDR":           addr,
		"HERALD_API_TOKEN":           "tok",
		"HERALD_REQUIRED_CATEGORIES": "security",
		"HERALD_LINK_SECRET":         strings.Repeat("s", 40),
		// Tests serve plain HTTP; a deployment gives its https:// name.
		"HERALD_PUBLIC_URL": "http://" + addr,
	})
	base := r.base
	create := func(cat string) map[string]any {
		t.Helper()
		req, err := http.NewRequest("POST", base+"/notifications", strings.NewReader(`{"user_id":"u-9","channel":"email","to":"ann@example.com","subject":"`+cat+`","body":"b","category":"`+cat+`"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		require.Equal(t, 201, resp.StatusCode, "%v", out)
		return out
	}
	require.Equal(t, "pending", create("news")["status"])
	require.Equal(t, "pending", create("security")["status"])
	var news, security *smtptest.Message
	require.Eventually(t, func() bool {
		for _, m := range r.smtp.Messages() {
			switch m.Subject {
			case "news":
				news = &m
			case "security":
				security = &m
			}
		}
		return news != nil && security != nil
	}, 30*time.Second, 20*time.Millisecond, "both emails arrive")
	require.Empty(t, security.Header.Get("List-Unsubscribe"), "a required category cannot be unsubscribed from")
	require.Equal(t, "List-Unsubscribe=One-Click", news.Header.Get("List-Unsubscribe-Post"))
	lu := news.Header.Get("List-Unsubscribe")
	require.True(t, strings.HasPrefix(lu, "<"+base+"/unsubscribe/") && strings.HasSuffix(lu, ">"), lu)
	target := strings.TrimSuffix(strings.TrimPrefix(lu, "<"), ">")

	// A tampered URL: 403, nothing changed.
	resp, err := http.Post(target+"A", "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 403, resp.StatusCode)
	require.Equal(t, "pending", create("news")["status"])

	// The provider's one-click POST, with the header's URL as written.
	resp, err = http.Post(target, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 200, resp.StatusCode)
	sup := create("news")
	require.Equal(t, "suppressed", sup["status"])
	require.Equal(t, "pending", create("security")["status"])

	// Four arrive (news, security, the news before the POST, security);
	// the suppressed one never does.
	require.Eventually(t, func() bool { return len(r.smtp.Messages()) >= 4 }, 30*time.Second, 20*time.Millisecond)
	req, err := http.NewRequest("GET", base+"/notifications?status=pending", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer tok")
	require.Eventually(t, func() bool {
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var page struct{ Items []any }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		return len(page.Items) == 0
	}, 30*time.Second, 20*time.Millisecond, "every other create settled")
	require.Len(t, r.smtp.Messages(), 4, "the suppressed email never arrives")
}
