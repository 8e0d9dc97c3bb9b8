package mail_test

import (
	"bufio"
	"bytes"
	"io"
	"mime"
	"mime/quotedprintable"
	netmail "net/mail"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
)

// crlf normalises line breaks the way Render promises to.
func crlf(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

func TestRender(t *testing.T) {
	t.Parallel()
	date := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("", 2*3600))
	long := strings.Repeat("0123456789 abcdefghij ", 30)
	tests := []struct {
		name    string
		subject string
		body    string
		from    string
	}{
		{name: "plain", subject: "Hello", body: "Hi there.\nBye.\n"},
		{name: "non-ASCII subject", subject: "Grüße aus Köln, 東京 と 🚀", body: "Grüße\n"},
		{name: "long non-ASCII subject", subject: strings.Repeat("Привет мир ", 60), body: "x"},
		{name: "long ASCII subject", subject: strings.TrimSpace(strings.Repeat("word ", 150)), body: "x"},
		{name: "subject with tab and double spaces", subject: "a\tb  c", body: "x"},
		{name: "dot lines", subject: "dots", body: ".\n..\n.\r\n. \nend\n.\n"},
		{name: "body is one dot", subject: "dot", body: "."},
		{name: "very long lines", subject: "long", body: long + "\n" + strings.Repeat("é", 500) + "\n" + strings.Repeat("x", 2000)},
		{name: "from lines", subject: "from", body: "From the start\n>From quoted\n>>From twice\nFrom " + strings.Repeat("y", 120) + "\n"},
		{name: "starts with From", subject: "from", body: "From me to you"},
		{name: "long >From line", subject: "from", body: strings.Repeat(">", 80) + "From " + strings.Repeat("z", 80)},
		{name: "CRLF body", subject: "crlf", body: "one\r\ntwo\r\n\r\nthree\r\n"},
		{name: "LF body", subject: "lf", body: "one\ntwo\n\nthree\n"},
		{name: "lone CR", subject: "cr", body: "one\rtwo"},
		{name: "no final line break", subject: "nofinal", body: "one\ntwo"},
		{name: "trailing spaces", subject: "ws", body: "trailing   \nand tab\t\nend "},
		{name: "equals and controls", subject: "eq", body: "a=b =3D =\n\x01\x7f\t"},
		{name: "non-ASCII from name", subject: "x", body: "x", from: "Jörg Müller <herald@example.com>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			from := tc.from
			if from == "" {
				from = "Herald <herald@example.com>"
			}
			e := mail.Email{
				MessageID: "<42@example.com>",
				From:      from,
				To:        "Ann <ann@example.org>",
				Subject:   tc.subject,
				Body:      tc.body,
			}
			raw := mail.Render(e, date)
			checkWellFormed(t, raw)

			msg, err := netmail.ReadMessage(bytes.NewReader(raw))
			require.NoError(t, err)
			h := msg.Header
			require.Equal(t, "<42@example.com>", h.Get("Message-ID"))
			require.Equal(t, "1.0", h.Get("MIME-Version"))
			require.Equal(t, "text/plain; charset=utf-8", h.Get("Content-Type"))
			require.Equal(t, "quoted-printable", h.Get("Content-Transfer-Encoding"))
			require.Equal(t, "Wed, 04 Mar 2026 05:06:07 +0200", h.Get("Date"))
			gotDate, err := h.Date()
			require.NoError(t, err)
			require.True(t, gotDate.Equal(date))

			subject, err := new(mime.WordDecoder).DecodeHeader(h.Get("Subject"))
			require.NoError(t, err)
			require.Equal(t, tc.subject, subject)

			gotFrom, err := netmail.ParseAddress(h.Get("From"))
			require.NoError(t, err)
			wantFrom, err := netmail.ParseAddress(from)
			require.NoError(t, err)
			require.Equal(t, wantFrom, gotFrom)
			to, err := h.AddressList("To")
			require.NoError(t, err)
			require.Equal(t, []*netmail.Address{{Name: "Ann", Address: "ann@example.org"}}, to)

			body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
			require.NoError(t, err)
			require.Equal(t, crlf(tc.body), string(body))
		})
	}
}

// checkWellFormed checks what every rendered message must satisfy: CRLF line
// endings only, ASCII only, no line over 998 characters, no body line an
// mbox reader would touch, and a final line break (so SMTP adds none).
func checkWellFormed(t *testing.T, raw []byte) {
	t.Helper()
	require.True(t, bytes.HasSuffix(raw, []byte("\r\n")), "message must end with CRLF")
	for i, c := range raw {
		require.Less(t, c, byte(0x80), "non-ASCII byte at %d", i)
		if c == '\n' {
			require.True(t, i > 0 && raw[i-1] == '\r', "bare LF at %d", i)
		}
		if c == '\r' {
			require.True(t, i+1 < len(raw) && raw[i+1] == '\n', "bare CR at %d", i)
		}
	}
	inBody := false
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		require.LessOrEqual(t, len(line), 998, "line too long: %q", line)
		if inBody {
			require.LessOrEqual(t, len(line), 76, "encoded body line too long: %q", line)
			require.False(t, strings.HasPrefix(strings.TrimLeft(line, ">"), "From "), "mbox-sensitive body line %q", line)
		}
		if line == "" {
			inBody = true
		}
	}
	require.NoError(t, sc.Err())
}

func TestRenderRefusesHeaderInjection(t *testing.T) {
	t.Parallel()
	e := mail.Email{
		MessageID: "<1@example.com>\r\nBcc: victim@example.net",
		From:      "herald@example.com\nX-Evil: 1",
		To:        "ann@example.org\r\nCc: other@example.net",
		Subject:   "hi\r\nX-Injected: yes\r\n\r\nfake body",
		Body:      "real body\n",
	}
	raw := mail.Render(e, time.Now())
	checkWellFormed(t, raw)
	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	require.NoError(t, err)
	for _, name := range []string{"Bcc", "Cc", "X-Evil", "X-Injected"} {
		require.Empty(t, msg.Header[name], name)
	}
	require.Len(t, msg.Header, 8, "exactly the eight headers Render writes")
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	require.NoError(t, err)
	require.Equal(t, "real body\r\n", string(body))
}

func TestRenderUsesNewEmailMessageID(t *testing.T) {
	t.Parallel()
	e := mail.NewEmail(notify.Outgoing{NotificationID: "7", To: "a@example.org", Subject: "s", Body: "b"}, "Herald <herald@mail.example.com>")
	msg, err := netmail.ReadMessage(bytes.NewReader(mail.Render(e, time.Now())))
	require.NoError(t, err)
	require.Equal(t, "<7@mail.example.com>", msg.Header.Get("Message-ID"))
}

// An email with an unsubscribe URL carries RFC 8058's two headers; one
// without carries neither; a line break in the URL injects nothing.
func TestRenderListUnsubscribe(t *testing.T) {
	t.Parallel()
	url := "https://herald.example.com/unsubscribe/eyJ1IjoiNDIifQ.c2ln"
	for _, html := range []string{"", "<p>hi</p>"} {
		raw := mail.Render(mail.Email{MessageID: "<1@example.com>", From: "herald@example.com", To: "a@example.org",
			Subject: "s", Body: "b\n", HTML: html, Unsubscribe: url}, time.Now())
		checkWellFormed(t, raw)
		msg, err := netmail.ReadMessage(bytes.NewReader(raw))
		require.NoError(t, err)
		require.Equal(t, "<"+url+">", msg.Header.Get("List-Unsubscribe"))
		require.Equal(t, "List-Unsubscribe=One-Click", msg.Header.Get("List-Unsubscribe-Post"))
	}
	raw := mail.Render(mail.Email{MessageID: "<1@example.com>", From: "herald@example.com", To: "a@example.org", Subject: "s", Body: "b\n"}, time.Now())
	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	require.NoError(t, err)
	require.Empty(t, msg.Header["List-Unsubscribe"])
	require.Empty(t, msg.Header["List-Unsubscribe-Post"])

	raw = mail.Render(mail.Email{MessageID: "<1@example.com>", From: "herald@example.com", To: "a@example.org", Subject: "s", Body: "b\n",
		Unsubscribe: url + "\r\nBcc: victim@example.net"}, time.Now())
	checkWellFormed(t, raw)
	msg, err = netmail.ReadMessage(bytes.NewReader(raw))
	require.NoError(t, err)
	require.Empty(t, msg.Header["Bcc"])
}
