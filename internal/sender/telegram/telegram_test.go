package telegram_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/telegram"
	"github.com/heraldhq/herald/internal/testkit/sendertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	sendertest.Run(t, sendertest.Harness{
		Start:      func(t *testing.T) sendertest.Peer { return startBotAPI(t) },
		RetryAfter: 7 * time.Second,
		// One bot, one limit: Destination nil, failures are channel-wide.
		NoIdentity: "the Bot API's sendMessage takes no idempotency key; a repeat after a crash between send and record is a second message",
	})
}

// The chat id goes as the Bot API takes it (a number, or an @username
// string) and the text verbatim.
func TestSendMessage(t *testing.T) {
	t.Parallel()
	b := startBotAPI(t)
	s := b.sender(t)
	text := "Deploy done ✅\nline two\t😀"
	require.NoError(t, s.Send(context.Background(), message("1", "-1001234567890", text)))
	require.NoError(t, s.Send(context.Background(), message("2", "@herald_alerts", "hi")))
	require.NoError(t, s.Send(context.Background(), message("3", "42", "x")))
	got := b.messages()
	require.Len(t, got, 3)
	require.JSONEq(t, `-1001234567890`, string(got[0].ChatID))
	require.Equal(t, text, got[0].Text)
	require.JSONEq(t, `"@herald_alerts"`, string(got[1].ChatID))
	require.JSONEq(t, `42`, string(got[2].ChatID))
}

// Each Bot API answer is classified by the worker's rules; none is scoped
// to a destination, and the token appears in no error.
func TestSendClassifiesReplies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		status       int
		desc, params string
		want         sendertest.Outcome
		after        time.Duration
		contains     string
	}{
		{"blocked", 403, "Forbidden: bot was blocked by the user", "", sendertest.Permanent, 0, "blocked"},
		{"kicked", 403, "Forbidden: bot was kicked from the group chat", "", sendertest.Permanent, 0, "kicked"},
		{"chat not found", 400, "Bad Request: chat not found", "", sendertest.Permanent, 0, "chat not found"},
		{"other 400", 400, "Bad Request: message text is empty", "", sendertest.Permanent, 0, "text is empty"},
		{"migrated", 400, "Bad Request: group chat was upgraded to a supergroup chat", `{"migrate_to_chat_id":-1009876543210}`, sendertest.Permanent, 0, "-1009876543210"},
		{"throttled", 429, "Too Many Requests: retry after 35", `{"retry_after":35}`, sendertest.Throttled, 35 * time.Second, "Too Many Requests"},
		{"unauthorized", 401, "Unauthorized", "", sendertest.ProviderDown, 0, "Unauthorized"},
		{"not found", 404, "Not Found", "", sendertest.ProviderDown, 0, "Not Found"},
		{"server error", 500, "Internal Server Error", "", sendertest.Retry, 0, "500"},
		{"bad gateway", 502, "Bad Gateway", "", sendertest.Retry, 0, "502"},
		{"echoes the token", 400, "Bad Request: " + testToken, "", sendertest.Permanent, 0, "REDACTED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startBotAPI(t)
			b.fail(tc.status, tc.desc, tc.params)
			err := b.sender(t).Send(context.Background(), message("c", "-100123", "hello"))
			require.Equal(t, tc.want, sendertest.OutcomeOf(t, err), "error %v", err)
			require.ErrorContains(t, err, tc.contains)
			require.NotContains(t, err.Error(), testToken)
			after, _ := notify.IsThrottled(err)
			require.Equal(t, tc.after, after)
			_, scoped := notify.DestinationOf(err)
			require.False(t, scoped, "one bot, one limit: channel-wide")
			require.Len(t, b.messages(), 1)
		})
	}
}

// A wrong token is the provider refusing us: sender down, and the probe
// says so too until the token is right.
func TestWrongToken(t *testing.T) {
	t.Parallel()
	b := startBotAPI(t)
	s := newSender(t, telegram.Config{Token: "999:wrong-token", APIBase: b.srv.URL})
	err := s.Send(context.Background(), message("w", "42", "hi"))
	require.Equal(t, sendertest.ProviderDown, sendertest.OutcomeOf(t, err), "error %v", err)
	require.NotContains(t, err.Error(), "wrong-token")
	err = s.Probe(context.Background())
	require.Equal(t, sendertest.ProviderDown, sendertest.OutcomeOf(t, err), "error %v", err)
	require.NotContains(t, err.Error(), "wrong-token")
	require.Empty(t, b.messages())
}

func TestProbe(t *testing.T) {
	t.Parallel()
	b := startBotAPI(t)
	s := b.sender(t)
	require.NoError(t, s.Probe(context.Background()))
	b.srv.Close()
	err := s.Probe(context.Background())
	require.Equal(t, sendertest.ProviderDown, sendertest.OutcomeOf(t, err), "error %v", err)
	require.NotContains(t, err.Error(), testToken)
}

// Failures before and after the hand-over: connection refused is the
// provider's outage, a dropped connection after the request is this
// message's attempt; the token is in neither error (net/http quotes the
// whole URL in its errors).
func TestSendConnectionFailures(t *testing.T) {
	t.Parallel()
	b := startBotAPI(t)
	base := b.srv.URL
	b.srv.Close()
	err := newSender(t, telegram.Config{APIBase: base}).Send(context.Background(), message("r", "42", "hi"))
	require.Equal(t, sendertest.ProviderDown, sendertest.OutcomeOf(t, err), "error %v", err)
	require.NotContains(t, err.Error(), testToken)

	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(drop.Close)
	err = newSender(t, telegram.Config{APIBase: drop.URL}).Send(context.Background(), message("d", "42", "hi"))
	require.Equal(t, sendertest.Retry, sendertest.OutcomeOf(t, err), "error %v", err)
	require.NotContains(t, err.Error(), testToken)
}

func TestSendCallerEnded(t *testing.T) {
	t.Parallel()
	b := startBotAPI(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := b.sender(t).Send(ctx, message("e", "42", "hi"))
	require.Equal(t, sendertest.Retry, sendertest.OutcomeOf(t, err))
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, b.messages())
}

func TestNew(t *testing.T) {
	t.Parallel()
	s := newSender(t, telegram.Config{})
	require.Equal(t, telegram.DefaultTimeout, s.Timeout())
	for name, cfg := range map[string]telegram.Config{
		"no token":       {},
		"token with /":   {Token: "12/../x"},
		"negative":       {Token: testToken, Timeout: -time.Second},
		"bad api":        {Token: testToken, APIBase: "ftp://x"},
		"api with creds": {Token: testToken, APIBase: "https://u:p@api.example"},
	} {
		_, err := telegram.New(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), testToken, name)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", telegram.MaxTextLen)
	emoji := strings.Repeat("😀", telegram.MaxTextLen/2) // 4096 UTF-16 units
	for _, tc := range []struct {
		name, to, subject, body string
		field                   string
	}{
		{"user id", "123456789", "", "hi", ""},
		{"group", "-123456789", "", "hi", ""},
		{"channel", "-1001234567890", "", "hi", ""},
		{"username", "@herald_bot", "", "hi", ""},
		{"username 32", "@" + strings.Repeat("a", 32), "", "hi", ""},
		{"4096 characters", "42", "", long, ""},
		{"4096 UTF-16 units of emoji", "42", "", emoji, ""},
		{"multi-line", "42", "", "a\n\tb\r\n", ""},
		{"empty to", "", "", "hi", "to"},
		{"zero", "0", "", "hi", "to"},
		{"plus", "+42", "", "hi", "to"},
		{"leading zero", "042", "", "hi", "to"},
		{"not a number", "12a", "", "hi", "to"},
		{"overflow", "99999999999999999999", "", "hi", "to"},
		{"spaces", " 42", "", "hi", "to"},
		{"bare @", "@", "", "hi", "to"},
		{"short username", "@abcd", "", "hi", "to"},
		{"long username", "@" + strings.Repeat("a", 33), "", "hi", "to"},
		{"username with dash", "@herald-bot", "", "hi", "to"},
		{"email", "a@example.com", "", "hi", "to"},
		{"subject", "42", "s", "hi", "subject"},
		{"empty body", "42", "", "", "body"},
		{"blank body", "42", "", " \n ", "body"},
		{"4097 characters", "42", "", long + "a", "body"},
		{"4097 UTF-16 units", "42", "", emoji + "a", "body"},
		{"invalid UTF-8", "42", "", "a\xffb", "body"},
		{"control", "42", "", "a\x00b", "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := telegram.Validate(notify.CreateRequest{UserID: "u", Channel: "telegram", To: tc.to, Subject: tc.subject, Body: tc.body})
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field, "error %v", err)
		})
	}
}

// FuzzValidate: Validate never panics, answers a *notify.FieldError on
// to, subject or body, and accepts only text the Bot API takes.
func FuzzValidate(f *testing.F) {
	for _, s := range [][3]string{
		{"-1001234567890", "", "hello"},
		{"@herald_bot", "", "😀"},
		{"0", "", "x"},
		{"@ab", "s", ""},
		{"42", "", "a\x00"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, to, subject, body string) {
		err := telegram.Validate(notify.CreateRequest{UserID: "u", Channel: "telegram", To: to, Subject: subject, Body: body})
		if err != nil {
			var fe *notify.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("not a FieldError: %v", err)
			}
			switch fe.Field {
			case "to", "subject", "body":
			default:
				t.Fatalf("field %q", fe.Field)
			}
			return
		}
		if subject != "" || !utf8.ValidString(body) || strings.TrimSpace(body) == "" || to == "" {
			t.Fatalf("accepted %q %q %q", to, subject, body)
		}
		units := 0
		for _, r := range body {
			units++
			if r > 0xFFFF {
				units++
			}
		}
		if units > telegram.MaxTextLen {
			t.Fatalf("accepted %d UTF-16 units", units)
		}
	})
}
