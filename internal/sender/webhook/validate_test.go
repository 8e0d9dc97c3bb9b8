package webhook_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/webhook"
)

func req(to, subject, body string) notify.CreateRequest {
	return notify.CreateRequest{UserID: "u", Channel: "webhook", To: to, Subject: subject, Body: body}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, to, subject, body string
		field                   string // "" when valid
	}{
		{"https", "https://hooks.example.com/a?b=c", "", `{"a":1}`, ""},
		{"http with port", "http://example.com:8080/", "", `[1,2]`, ""},
		{"JSON string body", "https://example.com/", "", `"hello"`, ""},
		{"public IPv4 literal", "https://93.184.215.14/", "", `{}`, ""},
		{"public IPv6 literal", "https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/", "", `{}`, ""},
		{"name that may resolve anywhere", "http://localhost:8080/", "", `{}`, ""},
		{"empty to", "", "", `{}`, "to"},
		{"relative", "/hooks", "", `{}`, "to"},
		{"no scheme", "example.com/hooks", "", `{}`, "to"},
		{"ftp", "ftp://example.com/", "", `{}`, "to"},
		{"javascript", "javascript:alert(1)", "", `{}`, "to"},
		{"opaque", "https:example.com", "", `{}`, "to"},
		{"userinfo", "https://user:pass@example.com/", "", `{}`, "to"},
		{"user only", "https://user@example.com/", "", `{}`, "to"},
		{"no host", "https:///path", "", `{}`, "to"},
		{"port zero", "https://example.com:0/", "", `{}`, "to"},
		{"port too big", "https://example.com:70000/", "", `{}`, "to"},
		{"space", "https://example.com/a b", "", `{}`, "to"},
		{"line break", "https://example.com/\r\nX: y", "", `{}`, "to"},
		{"too long", "https://example.com/" + strings.Repeat("a", webhook.MaxURLLen), "", `{}`, "to"},
		{"loopback", "http://127.0.0.1:8080/", "", `{}`, "to"},
		{"IPv6 loopback", "http://[::1]:8080/", "", `{}`, "to"},
		{"IPv4-mapped loopback", "http://[::ffff:127.0.0.1]/", "", `{}`, "to"},
		{"IPv4-mapped metadata", "http://[::ffff:169.254.169.254]/", "", `{}`, "to"},
		{"cloud metadata", "http://169.254.169.254/latest/meta-data/", "", `{}`, "to"},
		{"private 10", "http://10.0.0.1/", "", `{}`, "to"},
		{"private 172", "http://172.16.5.4/", "", `{}`, "to"},
		{"private 192", "http://192.168.1.1/", "", `{}`, "to"},
		{"ULA", "http://[fd00::1]/", "", `{}`, "to"},
		{"link-local v6", "http://[fe80::1]/", "", `{}`, "to"},
		{"zone", "http://[fe80::1%25eth0]/", "", `{}`, "to"},
		{"CGNAT", "http://100.100.1.1/", "", `{}`, "to"},
		{"multicast", "http://224.0.0.1/", "", `{}`, "to"},
		{"unspecified", "http://0.0.0.0/", "", `{}`, "to"},
		{"unspecified v6", "http://[::]/", "", `{}`, "to"},
		{"NAT64 of loopback", "http://[64:ff9b::7f00:1]/", "", `{}`, "to"},
		{"broadcast", "http://255.255.255.255/", "", `{}`, "to"},
		{"local-use NAT64 of metadata", "http://[64:ff9b:1::a9fe:a9fe]/", "", `{}`, "to"},
		{"NAT64 of a public address", "http://[64:ff9b::808:808]/", "", `{}`, ""},
		{"6to4", "http://[2002:7f00:1::1]/", "", `{}`, "to"},
		{"IPv4-translated", "http://[::ffff:0:7f00:1]/", "", `{}`, "to"},
		{"site-local", "http://[fec0::1]/", "", `{}`, "to"},
		{"Teredo", "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "", `{}`, "to"},
		{"benchmarking", "http://198.18.0.1/", "", `{}`, "to"},
		{"documentation v6", "http://[2001:db8::1]/", "", `{}`, "to"},
		{"IPv4 as one decimal number", "http://2130706433/", "", `{}`, "to"},
		{"IPv4 as one hex number", "http://0x7f000001/", "", `{}`, "to"},
		{"IPv4 in octal", "http://0177.0.0.1/", "", `{}`, "to"},
		{"IPv4 in two parts", "http://127.1/", "", `{}`, "to"},
		{"IPv4 hex and short", "http://0x7f.1/", "", `{}`, "to"},
		{"IPv4 in three parts", "http://127.0.1:8080/", "", `{}`, "to"},
		{"IPv4 with a trailing dot", "http://127.0.0.1./", "", `{}`, "to"},
		{"IPv4 with leading zeros", "http://127.000.0.01/", "", `{}`, "to"},
		{"metadata in hex and octal", "http://0xA9.0376.43518/", "", `{}`, "to"},
		{"public IPv4 as one number", "http://134744072/", "", `{}`, "to"},
		{"public IPv4 with a trailing dot", "http://8.8.8.8./", "", `{}`, "to"},
		{"full-width digits", "http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/", "", `{}`, "to"},
		{"ends in a number, not an address", "http://1.2.3.4.5/", "", `{}`, "to"},
		{"last label a bad number", "http://example.09/", "", `{}`, "to"},
		{"number-like label inside a name", "http://0x7f.example.com/", "", `{}`, ""},
		{"digits then a name", "http://1.2.3.example/", "", `{}`, ""},
		{"name with a trailing dot", "https://example.com./", "", `{}`, ""},
		{"subject given", "https://example.com/", "hi", `{}`, "subject"},
		{"empty body", "https://example.com/", "", "", "body"},
		{"blank body", "https://example.com/", "", "  \n", "body"},
		{"not JSON", "https://example.com/", "", "hello", "body"},
		{"two values", "https://example.com/", "", `{} {}`, "body"},
		{"truncated", "https://example.com/", "", `{"a":`, "body"},
		{"invalid UTF-8", "https://example.com/", "", "\"\xff\"", "body"},
		{"too long", "https://example.com/", "", `"` + strings.Repeat("a", webhook.MaxBodyLen) + `"`, "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := webhook.Validate(req(tc.to, tc.subject, tc.body))
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

// HERALD_WEBHOOK_ALLOW opens a literal address at create as it does at
// send, and only the ranges it names.
func TestValidateAllowing(t *testing.T) {
	t.Parallel()
	allow := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	require.NoError(t, webhook.ValidateAllowing(req("http://10.1.2.3/", "", `{}`), allow))
	require.Error(t, webhook.ValidateAllowing(req("http://10.2.0.1/", "", `{}`), allow))
	require.NoError(t, webhook.ValidateAllowing(req("http://[::ffff:10.1.0.9]/", "", `{}`), allow))
	s := newSender(t, webhook.Config{Allow: loopback})
	require.NoError(t, s.Validate(req("http://127.0.0.1:9/", "", `{}`)))
	require.Error(t, s.Validate(req("http://169.254.169.254/", "", `{}`)))
	require.NoError(t, s.Validate(req("http://[64:ff9b::7f00:1]:9/", "", `{}`)), "NAT64 of an allowed address")
	// A legacy spelling is refused whatever the allow list opens, and the
	// error says how to write the address.
	var fe *notify.FieldError
	require.ErrorAs(t, s.Validate(req("http://127.1:9/", "", `{}`)), &fe)
	require.Equal(t, "to", fe.Field)
	require.Contains(t, fe.Message, "write 127.0.0.1")
	require.NotContains(t, fe.Message, "loopback", "loopback is open here")
}

// The refusal of a legacy spelling names the address it stands for, and
// why that address is refused when it is.
func TestValidateLegacyIPv4Message(t *testing.T) {
	t.Parallel()
	var fe *notify.FieldError
	require.ErrorAs(t, webhook.Validate(req("http://0x7f000001/", "", `{}`)), &fe)
	require.Equal(t, "to", fe.Field)
	require.Contains(t, fe.Message, "127.0.0.1")
	require.Contains(t, fe.Message, "loopback")
	require.Contains(t, fe.Message, "HERALD_WEBHOOK_ALLOW=127.0.0.1/32", "the refusal names the setting that opens the address")
	require.ErrorAs(t, webhook.Validate(req("http://134744072/", "", `{}`)), &fe)
	require.Contains(t, fe.Message, "write 8.8.8.8")
	require.NotContains(t, fe.Message, "not sent to", "a public address is refused for its spelling only")
}

// A literal address the guard refuses names the setting that opens it on
// purpose, with that address alone (issue 38): a test's receiver on
// loopback is the first thing a newcomer tries.
func TestValidateRefusalNamesAllow(t *testing.T) {
	t.Parallel()
	for to, want := range map[string]string{
		"http://127.0.0.1:8081/hook":     "loopback (to send to it on purpose, for tests or an internal endpoint you trust, set HERALD_WEBHOOK_ALLOW=127.0.0.1/32 on the API and the workers)",
		"http://[::1]:8081/hook":         "HERALD_WEBHOOK_ALLOW=::1/128",
		"http://10.0.0.7/hook":           "private (to send to it on purpose, for tests or an internal endpoint you trust, set HERALD_WEBHOOK_ALLOW=10.0.0.7/32",
		"http://[fe80::1%25eth0]:80/":    "", // a zone is refused for what it is, not by the guard
		"http://169.254.169.254/latest/": "HERALD_WEBHOOK_ALLOW=169.254.169.254/32",
	} {
		var fe *notify.FieldError
		require.ErrorAs(t, webhook.Validate(req(to, "", `{}`)), &fe, to)
		require.Equal(t, "to", fe.Field, to)
		if want != "" {
			require.Contains(t, fe.Message, want, to)
		}
	}
	// The same at send, on the address dialled.
	err := (&webhook.RefusedError{Addr: netip.MustParseAddr("127.0.0.1"), Reason: "loopback"}).Error()
	require.Contains(t, err, "HERALD_WEBHOOK_ALLOW=127.0.0.1/32")
}

// FuzzValidate: Validate never panics, answers a *notify.FieldError on
// to, subject or body, and accepts only what a sender can post.
func FuzzValidate(f *testing.F) {
	for _, s := range [][3]string{
		{"https://example.com/hook", "", `{"a":1}`},
		{"http://[::ffff:127.0.0.1]:80/", "", `{}`},
		{"http://169.254.169.254/", "", `"x"`},
		{"https://u:p@example.com/", "", `{}`},
		{"https:///x", "s", "nope"},
		{"http://[fe80::1%25en0]/", "", `[]`},
		{"http://0x7f.1/", "", `{}`},
		{"http://127.0.0.1./", "", `{}`},
		{"http://[64:ff9b:1::a9fe:a9fe]/", "", `{}`},
		{"http://2130706433/", "", `{}`},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, to, subject, body string) {
		err := webhook.Validate(req(to, subject, body))
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
		if subject != "" || !utf8.ValidString(body) || !json.Valid([]byte(body)) || len(to) > webhook.MaxURLLen {
			t.Fatalf("accepted %q %q %q", to, subject, body)
		}
		u, err := url.Parse(to)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			t.Fatalf("accepted the destination %q", to)
		}
	})
}

func TestParseAllow(t *testing.T) {
	t.Parallel()
	got, err := webhook.ParseAllow(" 127.0.0.0/8, ::1/128,10.1.2.3,10.9.9.9/16,")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("10.1.2.3/32"), netip.MustParsePrefix("10.9.0.0/16"),
	}, got)
	got, err = webhook.ParseAllow("")
	require.NoError(t, err)
	require.Empty(t, got)
	for _, bad := range []string{"localhost", "10.0.0.0/33", "fe80::1%eth0", "10.0.0.0/8;"} {
		_, err := webhook.ParseAllow(bad)
		require.Error(t, err, bad)
	}
}
