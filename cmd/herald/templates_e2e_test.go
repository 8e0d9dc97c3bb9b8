package main

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// A templated email in two locales reaches a real SMTP server, on both
// shapes: each recipient's address and locale are looked up at create, the
// subject, text and HTML parts rendered (the data's markup escaped in the
// HTML part only), and what arrives is what the outbox held. Then an
// erasure request (herald recipients erase, on the database while herald
// runs) anonymises one user's notifications: read back from every table of
// the database, their address, name and rendered text are gone, and the
// other user's are kept.
func TestTemplatedEmailInTwoLocales(t *testing.T) {
	onEachShape(t, templatedEmailInTwoLocales)
}

func templatedEmailInTwoLocales(t *testing.T, sh shape) {
	r := sh.start(t, nil)
	base := r.base

	call := func(method, path, body string) map[string]any {
		t.Helper()
		return call(t, base, method, path, body)
	}
	call("PUT", "/templates/order_shipped", `{"channel":"email","subject":"Order {{.order}} shipped","text":"Hi {{.name}}, order {{.order}} is on its way.","html":"<p>Hi {{.name}}, order <b>{{.order}}</b> is on its way.</p>"}`)
	call("PUT", "/templates/order_shipped", `{"channel":"email","locale":"de","subject":"Bestellung {{.order}} verschickt","text":"Hallo {{.name}}, Bestellung {{.order}} ist unterwegs.","html":"<p>Hallo {{.name}}, Bestellung <b>{{.order}}</b> ist unterwegs.</p>"}`)
	call("PUT", "/recipients/u-en", `{"email":"en@example.com","locale":"en-GB"}`)
	call("PUT", "/recipients/u-de", `{"email":"de@example.com","locale":"de-DE"}`)
	en := call("POST", "/notifications", `{"user_id":"u-en","channel":"email","template":"order_shipped","data":{"name":"<i>Ada</i>","order":42}}`)
	de := call("POST", "/notifications", `{"user_id":"u-de","channel":"email","template":"order_shipped","data":{"name":"Jörg & Co","order":43}}`)

	var msgs []smtptest.Message
	require.Eventually(t, func() bool {
		msgs = r.smtp.Messages()
		return len(msgs) >= 2
	}, 30*time.Second, 20*time.Millisecond, "two emails arrive")
	require.Len(t, msgs, 2)
	got := map[string]smtptest.Message{}
	for _, m := range msgs {
		got[m.To[0]] = m
	}
	for _, tc := range []struct {
		to, id, subject, text, html string
	}{
		{"en@example.com", en["id"].(string), "Order 42 shipped", "Hi <i>Ada</i>, order 42 is on its way.",
			"<p>Hi &lt;i&gt;Ada&lt;/i&gt;, order <b>42</b> is on its way.</p>"},
		{"de@example.com", de["id"].(string), "Bestellung 43 verschickt", "Hallo Jörg & Co, Bestellung 43 ist unterwegs.",
			"<p>Hallo Jörg &amp; Co, Bestellung <b>43</b> ist unterwegs.</p>"},
	} {
		m, ok := got[tc.to]
		require.True(t, ok, "a message to %s", tc.to)
		require.Equal(t, tc.subject, m.Subject)
		require.Equal(t, "<"+tc.id+"@example.com>", m.MessageID)
		text, html := alternatives(t, m.Data)
		require.Equal(t, tc.text, text)
		require.Equal(t, tc.html, html)
	}

	// The erasure request, on the database while herald runs. Before it,
	// the database holds what it erases (so that the check below can fail).
	personal := []string{"de@example.com", "Jörg", "Bestellung 43"}
	kept := []string{"en@example.com", "u-de"}
	before := r.holding(t, append(personal, kept...)...)
	for _, p := range append(personal, kept...) {
		require.Contains(t, before[p], "notifications", "%q is in the database before the erasure", p)
	}
	out := r.herald(t, "recipients", "erase", "u-de")
	require.Contains(t, out, "recipient record deleted: true; 1 notification(s)")
	after := r.holding(t, append(personal, kept...)...)
	for _, p := range personal {
		require.Empty(t, after[p], "%q is left in the database after the erasure", p)
	}
	require.Contains(t, after["en@example.com"], "notifications", "another user's data is kept")
	require.Contains(t, after["u-de"], "notifications", "the user id stays")
	shown := call("GET", "/notifications/"+de["id"].(string), "")
	require.Empty(t, shown["to"])
	require.Empty(t, shown["subject"])
	require.Empty(t, shown["body"])
	require.Equal(t, "u-de", shown["user_id"])
	other := call("GET", "/notifications/"+en["id"].(string), "")
	require.Equal(t, "en@example.com", other["to"])
}

// alternatives reads the text and HTML parts of a multipart/alternative
// message.
func alternatives(t *testing.T, data []byte) (text, html string) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	require.NoError(t, err)
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "multipart/alternative", mt)
	r := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := r.NextRawPart()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Equal(t, "quoted-printable", p.Header.Get("Content-Transfer-Encoding"))
		b, err := io.ReadAll(quotedprintable.NewReader(p))
		require.NoError(t, err)
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		switch ct {
		case "text/plain":
			text = string(b)
		case "text/html":
			html = string(b)
		}
	}
	return text, html
}
