package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
	"github.com/heraldhq/herald/internal/testkit/sendertest"
)

// verify checks a request's Standard Webhooks signature as a receiver
// would, written from the specification rather than with the sender's
// code: the key is the base64 after "whsec_", the signed content is
// "id.timestamp.body", webhook-signature holds space-separated "v1,<base64
// HMAC-SHA256>" entries of which one must match, and the timestamp must be
// within five minutes of now.
func verify(secret string, h http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("missing headers: id %q timestamp %q signature %q", id, ts, sigs)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %w", ts, err)
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("timestamp %s is %s away", ts, d)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no signature in %q matches", sigs)
}

// The receiver gets the body verbatim, as JSON, with headers its
// Standard Webhooks library verifies; the id is the same on every attempt.
func TestSendSigned(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	// Rotation: the second secret is a receiver's business; herald signs
	// with the first only.
	s := newSender(t, webhook.Config{Secret: testSecret + ", " + otherSecret, Allow: loopback})
	body := "{\"order\": 42,\n \"items\": [\"a\", \"\u00e9\"]}"
	m := r.outgoing("17", "/hooks/a", body)

	r.Set(sendertest.Fail)
	require.Equal(t, sendertest.Retry, sendertest.OutcomeOf(t, s.Send(context.Background(), m)))
	r.Set(sendertest.Accept)
	require.NoError(t, s.Send(context.Background(), m))

	got := r.requests()
	require.Len(t, got, 2)
	for _, q := range got {
		require.Equal(t, body, string(q.Body), "the body is posted verbatim")
		require.Equal(t, "application/json", q.Header.Get("Content-Type"))
		require.Equal(t, "msg_17", q.Header.Get("webhook-id"), "derived from the notification id")
		require.NoError(t, verify(testSecret, q.Header, q.Body))
		require.Error(t, verify(otherSecret, q.Header, q.Body), "signed with the first secret only")
		require.Len(t, strings.Fields(q.Header.Get("webhook-signature")), 1, "one signature")
		// A tampered body does not verify: the check can fail.
		require.Error(t, verify(testSecret, q.Header, append([]byte(" "), q.Body...)))
	}
}

// The SSRF guard refuses, without HERALD_WEBHOOK_ALLOW, every address of
// the host's own networks: checked on the address dialled, so a name that
// resolves there is refused as a literal is. A refusal is permanent and
// names the reason; nothing reaches the receiver.
func TestGuardRefusesAtSend(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	r.Set(sendertest.Accept)
	port := r.srv.Listener.Addr().(*net.TCPAddr).Port
	guarded := newSender(t, webhook.Config{})
	for _, tc := range []struct {
		name, to, reason string
	}{
		{"name resolving to 127.0.0.1", fmt.Sprintf("http://localhost:%d/x", port), "loopback"},
		{"IPv4 loopback", fmt.Sprintf("http://127.0.0.1:%d/x", port), "loopback"},
		{"IPv6 loopback", fmt.Sprintf("http://[::1]:%d/x", port), "loopback"},
		{"IPv4-mapped IPv6", fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/x", port), "loopback"},
		{"private", "http://10.1.2.3:9/x", "private"},
		{"cloud metadata", "http://169.254.169.254/latest/meta-data/", "link-local"},
		{"CGNAT", "http://100.64.0.1:9/", "CGNAT"},
		{"unspecified", fmt.Sprintf("http://0.0.0.0:%d/x", port), "unspecified"},
		{"local-use NAT64 of metadata", "http://[64:ff9b:1::a9fe:a9fe]/", "local-use NAT64"},
		{"6to4 of loopback", fmt.Sprintf("http://[2002:7f00:1::1]:%d/x", port), "6to4"},
		// A row written before legacy spellings were refused at create.
		{"legacy spelling of loopback", fmt.Sprintf("http://127.1:%d/x", port), "legacy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := notify.Outgoing{NotificationID: "g", To: tc.to, Body: `{}`}
			err := guarded.Send(context.Background(), m)
			require.Equal(t, sendertest.Permanent, sendertest.OutcomeOf(t, err), "error %v", err)
			require.ErrorContains(t, err, tc.reason)
		})
	}
	require.Empty(t, r.requests(), "nothing reached the receiver")

	// The same receiver by name, once loopback is allowed: the guard, not
	// the address, refused it above.
	allowed := newSender(t, webhook.Config{Allow: loopback})
	require.NoError(t, allowed.Send(context.Background(),
		notify.Outgoing{NotificationID: "g", To: fmt.Sprintf("http://localhost:%d/x", port), Body: `{}`}))
	require.NoError(t, allowed.Send(context.Background(),
		notify.Outgoing{NotificationID: "g", To: fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/x", port), Body: `{}`}))
	require.Len(t, r.requests(), 2)
}

// A redirect is not followed, least of all to a private address: it is
// the endpoint's permanent answer, naming where it pointed.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	target := startReceiver(t)
	target.Set(sendertest.Accept)
	for _, loc := range []string{"http://169.254.169.254/latest/meta-data/", target.url("/elsewhere")} {
		r := startReceiver(t)
		r.answer(func(w http.ResponseWriter, req *http.Request) {
			http.Redirect(w, req, loc, http.StatusTemporaryRedirect)
		})
		err := newSender(t, webhook.Config{Allow: loopback}).Send(context.Background(), r.outgoing("r", "/", `{}`))
		require.Equal(t, sendertest.Permanent, sendertest.OutcomeOf(t, err), "error %v", err)
		require.ErrorContains(t, err, "status 307")
		require.ErrorContains(t, err, loc)
	}
	require.Empty(t, target.requests(), "the redirect's target was never asked")
}

// Each answer of the endpoint is classified by the worker's rules.
func TestSendClassifiesAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		want   sendertest.Outcome
		after  time.Duration // for throttled
	}{
		{name: "200", status: 200, want: sendertest.Sent},
		{name: "202", status: 202, want: sendertest.Sent},
		{name: "410 gone", status: 410, want: sendertest.Permanent},
		{name: "400", status: 400, want: sendertest.Permanent},
		{name: "404", status: 404, want: sendertest.Permanent},
		{name: "408", status: 408, want: sendertest.Retry},
		{name: "500", status: 500, want: sendertest.Retry},
		{name: "502", status: 502, want: sendertest.Retry},
		{name: "503 without Retry-After", status: 503, want: sendertest.Retry},
		{name: "503 with Retry-After", status: 503, header: map[string]string{"Retry-After": "3"}, want: sendertest.Throttled, after: 3 * time.Second},
		{name: "429 with Retry-After", status: 429, header: map[string]string{"Retry-After": "120"}, want: sendertest.Throttled, after: 2 * time.Minute},
		{name: "429 without Retry-After", status: 429, want: sendertest.Throttled},
		{name: "429 with a huge Retry-After", status: 429, header: map[string]string{"Retry-After": "99999999"}, want: sendertest.Throttled, after: time.Hour},
		{name: "302", status: 302, header: map[string]string{"Location": "https://example.com/new"}, want: sendertest.Permanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startReceiver(t)
			r.answer(func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte("reason from the endpoint"))
			})
			s := newSender(t, webhook.Config{Allow: loopback})
			m := r.outgoing("c", "/hooks/TOKEN-IN-PATH", `{"a":1}`)
			err := s.Send(context.Background(), m)
			require.Equal(t, tc.want, sendertest.OutcomeOf(t, err), "error %v", err)
			require.Len(t, r.requests(), 1)
			if err == nil {
				return
			}
			require.NotContains(t, err.Error(), "TOKEN-IN-PATH", "the URL's path stays out of errors")
			require.ErrorContains(t, err, strconv.Itoa(tc.status))
			key, scoped := notify.DestinationOf(err)
			if tc.want == sendertest.Throttled {
				after, _ := notify.IsThrottled(err)
				require.Equal(t, tc.after, after)
				require.True(t, scoped)
				require.Equal(t, r.srv.URL, key)
			} else {
				require.False(t, scoped, "only the endpoint's throttling or outage is scoped")
			}
		})
	}
}

// Failures once the request reached the endpoint are this message's
// attempt: a slow endpoint (no answer within the timeout) and a dropped
// connection, before or after the body was read.
func TestSendFailuresAfterHandOver(t *testing.T) {
	t.Parallel()
	drop := func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		_ = conn.Close()
	}
	for _, tc := range []struct {
		name    string
		handler func(r *receiver) http.HandlerFunc
		timeout time.Duration
		want    string
	}{
		{"slow endpoint", func(r *receiver) http.HandlerFunc {
			return func(w http.ResponseWriter, req *http.Request) {
				select {
				case <-req.Context().Done():
				case <-r.release:
				}
			}
		}, time.Second, "no reply within"},
		{"connection dropped", func(*receiver) http.HandlerFunc { return drop }, 5 * time.Second, "connection failed during the request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startReceiver(t)
			r.answer(tc.handler(r))
			s := newSender(t, webhook.Config{Allow: loopback, Timeout: tc.timeout})
			err := s.Send(context.Background(), r.outgoing("h", "/", `{"a":1}`))
			require.Equal(t, sendertest.Retry, sendertest.OutcomeOf(t, err), "error %v", err)
			require.ErrorContains(t, err, tc.want)
			require.Len(t, r.requests(), 1, "the request reached the endpoint")
		})
	}
}

// A peer that drops the connection after the request's headers, before
// its body: the hand-over had begun, so it is this message's attempt.
func TestSendDroppedBeforeBody(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	heads := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		var head []byte
		buf := make([]byte, 1)
		for !strings.HasSuffix(string(head), "\r\n\r\n") {
			if _, err := conn.Read(buf); err != nil {
				break
			}
			head = append(head, buf[0])
		}
		heads <- string(head)
	}()
	s := newSender(t, webhook.Config{Allow: loopback})
	err = s.Send(context.Background(), notify.Outgoing{NotificationID: "b", To: "http://" + ln.Addr().String() + "/", Body: `{"big":"` + strings.Repeat("x", 1<<20) + `"}`})
	require.Equal(t, sendertest.Retry, sendertest.OutcomeOf(t, err), "error %v", err)
	require.Contains(t, <-heads, "Webhook-Id: msg_b", "the request's headers reached the peer")
}

// Failures before anything reached the endpoint are its outage, scoped to
// it: connection refused, a name that does not resolve, a TLS handshake
// that fails.
func TestSendEndpointDown(t *testing.T) {
	t.Parallel()
	closed := startReceiver(t)
	closed.srv.Close()
	plain := startReceiver(t) // speaks HTTP, not TLS
	plain.Set(sendertest.Accept)
	for _, tc := range []struct{ name, to, key string }{
		{"connection refused", closed.url("/x"), closed.srv.URL},
		{"no such host", "http://nothing.invalid/x", "http://nothing.invalid:80"},
		{"TLS handshake", strings.Replace(plain.url("/x"), "http://", "https://", 1), strings.Replace(plain.srv.URL, "http://", "https://", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSender(t, webhook.Config{Allow: loopback, Timeout: 3 * time.Second})
			err := s.Send(context.Background(), notify.Outgoing{NotificationID: "d", To: tc.to, Body: `{}`})
			require.Equal(t, sendertest.ProviderDown, sendertest.OutcomeOf(t, err), "error %v", err)
			key, scoped := notify.DestinationOf(err)
			require.True(t, scoped, "one endpoint's outage pauses only its deliveries")
			require.Equal(t, tc.key, key)
		})
	}
	require.Empty(t, plain.requests(), "the TLS handshake failed before any request")
}

// A caller that gave up before the send gets a plain error: the endpoint
// was never asked, and is not down.
func TestSendCallerEnded(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	r.Set(sendertest.Accept)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := newSender(t, webhook.Config{Allow: loopback}).Send(ctx, r.outgoing("e", "/", `{}`))
	require.Equal(t, sendertest.Retry, sendertest.OutcomeOf(t, err), "error %v", err)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, r.requests())
}

// A stored destination that is no longer valid (a guard opened when it
// was created and closed since) is permanent.
func TestSendInvalidDestination(t *testing.T) {
	t.Parallel()
	s := newSender(t, webhook.Config{})
	for _, to := range []string{"ftp://example.com/", "http://user:pw@example.com/", "http://127.0.0.1:9/"} {
		err := s.Send(context.Background(), notify.Outgoing{NotificationID: "i", To: to, Body: `{}`})
		require.Equal(t, sendertest.Permanent, sendertest.OutcomeOf(t, err), "%s: %v", to, err)
		require.NotContains(t, err.Error(), "pw")
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	s, err := webhook.New(webhook.Config{Secret: testSecret})
	require.NoError(t, err)
	require.Equal(t, webhook.DefaultTimeout, s.Timeout())
	require.Equal(t, 3*time.Second, newSender(t, webhook.Config{Timeout: 3 * time.Second}).Timeout())
}

func TestDestination(t *testing.T) {
	t.Parallel()
	s := newSender(t, webhook.Config{})
	for to, want := range map[string]string{
		"https://Example.COM/a?b=c":     "https://example.com:443",
		"http://example.com/a":          "http://example.com:80",
		"https://example.com:8443/x":    "https://example.com:8443",
		"http://[2001:DB8::1]:8080/x":   "http://[2001:db8::1]:8080",
		"https://[2001:db8::1]/x":       "https://[2001:db8::1]:443",
		"http://93.184.215.14:81/hooks": "http://93.184.215.14:81",
	} {
		require.Equal(t, want, s.Destination(notify.Outgoing{To: to}), to)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	secretKey := base64.StdEncoding.EncodeToString([]byte("a secret key of 32 bytes, hidden"))
	for name, cfg := range map[string]webhook.Config{
		"no secret":        {Timeout: time.Second},
		"no prefix":        {Secret: secretKey, Timeout: time.Second},
		"not base64":       {Secret: "whsec_" + secretKey[:len(secretKey)-3] + "!!!", Timeout: time.Second},
		"short key":        {Secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("short")), Timeout: time.Second},
		"bad second":       {Secret: testSecret + ",whsec_" + secretKey[:10] + "*", Timeout: time.Second},
		"negative timeout": {Secret: testSecret, Timeout: -time.Second},
		"invalid prefix":   {Secret: testSecret, Timeout: time.Second, Allow: []netip.Prefix{{}}},
	} {
		_, err := webhook.New(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), secretKey[:10], "%s: the secret stays out of errors", name)
	}
}

// HTTPS to an endpoint with a private CA, trusted through TLSConfig.
func TestSendHTTPS(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 2)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	s := newSender(t, webhook.Config{Allow: loopback, TLSConfig: &tls.Config{RootCAs: pool}})
	require.NoError(t, s.Send(context.Background(), notify.Outgoing{NotificationID: "s", To: srv.URL + "/h", Body: `{}`}))
	require.Len(t, got, 1)
	require.Equal(t, "msg_s", (<-got).Get("webhook-id"))

	// Without the CA the handshake fails: the endpoint's outage.
	err := newSender(t, webhook.Config{Allow: loopback}).Send(context.Background(), notify.Outgoing{NotificationID: "s", To: srv.URL + "/h", Body: `{}`})
	require.Equal(t, sendertest.ProviderDown, sendertest.OutcomeOf(t, err), "error %v", err)
	require.Empty(t, got, "no request reached the endpoint")
}

// A huge error page is read only up to a cap; the error quotes its start.
func TestSendLongReply(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	r.answer(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(strings.Repeat("e", 8<<20)))
	})
	err := newSender(t, webhook.Config{Allow: loopback}).Send(context.Background(), r.outgoing("l", "/", `{}`))
	require.Equal(t, sendertest.Retry, sendertest.OutcomeOf(t, err), "error %v", err)
	require.Less(t, len(err.Error()), 400)
	require.ErrorContains(t, err, "status 500: eeee")
}
