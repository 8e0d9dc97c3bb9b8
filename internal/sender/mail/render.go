// Package mail renders an email as the RFC 5322 message the senders hand
// on: the bytes an SMTP server receives and an mbox file stores.
package mail

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"mime"
	"mime/quotedprintable"
	netmail "net/mail"
	"strings"
	"time"
	"unicode/utf8"
)

// maxHeaderLine is the length RFC 5322 asks header lines to stay within;
// longer values are folded where that loses nothing.
const maxHeaderLine = 78

// maxQPLine is the longest encoded body line RFC 2045 allows, soft break
// included.
const maxQPLine = 76

// Render returns e as an RFC 5322 message with CRLF line endings,
// dated date: plain text in UTF-8, the body quoted-printable encoded.
//
// The output is safe for every store it meets on its way: the body is pure
// ASCII (so no 8BITMIME is needed), no line starts with "From " or ">From "
// (so neither mboxo nor mboxrd readers alter it), and a body without a final
// line break ends in a soft line break, so SMTP's required final CRLF does
// not add one when the body is decoded. Header values never carry a line
// break: one would let a value inject headers, so any control character in
// them is replaced by a space.
func Render(e Email, date time.Time) []byte {
	var b bytes.Buffer
	writeHeader(&b, "From", addressValue(e.From))
	writeHeader(&b, "To", addressValue(e.To))
	writeHeader(&b, "Subject", textValue(e.Subject))
	writeHeader(&b, "Date", date.Format(time.RFC1123Z))
	writeHeader(&b, "Message-ID", sanitize(e.MessageID))
	if e.Unsubscribe != "" {
		// RFC 8058: the URL (an HTTPS one, which herald serves, signed)
		// and the one-click POST. A DKIM signature, when the relay adds
		// one, must cover both.
		writeHeader(&b, "List-Unsubscribe", "<"+sanitize(e.Unsubscribe)+">")
		writeHeader(&b, "List-Unsubscribe-Post", "List-Unsubscribe=One-Click")
	}
	writeHeader(&b, "MIME-Version", "1.0")
	if e.HTML == "" {
		writeHeader(&b, "Content-Type", "text/plain; charset=utf-8")
		writeHeader(&b, "Content-Transfer-Encoding", "quoted-printable")
		b.WriteString("\r\n")
		writeBody(&b, e.Body)
		return b.Bytes()
	}
	// A text and an HTML part, the text first (RFC 2046: the last part
	// is the preferred one). The boundary holds "=_", which
	// quoted-printable text never does (it encodes every "="), so no part
	// can contain it; it is derived from the Message-ID, so every attempt
	// renders the same bytes.
	sum := sha256.Sum256([]byte(e.MessageID))
	boundary := "=_herald_" + hex.EncodeToString(sum[:12])
	writeHeader(&b, "Content-Type", `multipart/alternative; boundary="`+boundary+`"`)
	b.WriteString("\r\n")
	for _, p := range []struct{ ctype, body string }{{"text/plain", e.Body}, {"text/html", e.HTML}} {
		b.WriteString("--" + boundary + "\r\n")
		writeHeader(&b, "Content-Type", p.ctype+"; charset=utf-8")
		writeHeader(&b, "Content-Transfer-Encoding", "quoted-printable")
		b.WriteString("\r\n")
		writeBody(&b, p.body)
		// The CRLF before a delimiter belongs to it: this one keeps the
		// part's own last line break (or soft break).
		b.WriteString("\r\n")
	}
	b.WriteString("--" + boundary + "--\r\n")
	return b.Bytes()
}

// sanitize replaces control characters other than tab with spaces: a CR or
// LF in a header value would start a header of the caller's choosing.
func sanitize(v string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || (r >= ' ' && r != 0x7f) {
			return r
		}
		return ' '
	}, v)
}

// addressValue renders an address header. A non-ASCII display name is
// RFC 2047-encoded so the header stays ASCII; anything else is kept as given.
func addressValue(v string) string {
	v = sanitize(v)
	if isASCII(v) {
		return v
	}
	if a, err := netmail.ParseAddress(v); err == nil {
		return a.String()
	}
	return v
}

// textValue renders an unstructured header such as Subject.
func textValue(v string) string {
	v = sanitize(v)
	if isASCII(v) {
		return v
	}
	return mime.QEncoding.Encode("utf-8", v)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// writeHeader writes one header field, folded at single spaces once it grows
// past maxHeaderLine. Only a single space between two non-blank characters
// is a fold point: unfolding (RFC 5322 2.2.3, and net/textproto) restores it
// exactly, and between encoded words the space carries no meaning anyway.
func writeHeader(b *bytes.Buffer, name, value string) {
	line := name + ": " + value
	start := 0     // start of the current physical line in line
	lastFold := -1 // last fold point seen on the current physical line
	for i := len(name) + 2; i < len(line); i++ {
		if line[i] == ' ' && i > 0 && i+1 < len(line) && !isBlank(line[i-1]) && !isBlank(line[i+1]) {
			if i-start > maxHeaderLine && lastFold > start {
				b.WriteString(line[start:lastFold])
				b.WriteString("\r\n")
				start = lastFold
			}
			lastFold = i
		}
	}
	if len(line)-start > maxHeaderLine && lastFold > start {
		b.WriteString(line[start:lastFold])
		b.WriteString("\r\n")
		start = lastFold
	}
	b.WriteString(line[start:])
	b.WriteString("\r\n")
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// writeBody writes the body quoted-printable encoded with CRLF line breaks
// (a lone CR or LF counts as a line break too).
func writeBody(b *bytes.Buffer, body string) {
	body = strings.ReplaceAll(body, "\r\n", "\n")
	body = strings.ReplaceAll(body, "\r", "\n")
	var enc bytes.Buffer
	w := quotedprintable.NewWriter(&enc)
	// Writes to a bytes.Buffer cannot fail.
	_, _ = w.Write([]byte(strings.ReplaceAll(body, "\n", "\r\n")))
	_ = w.Close()
	out := enc.Bytes()
	for len(out) > 0 {
		var line []byte
		if i := bytes.Index(out, []byte("\r\n")); i >= 0 {
			line, out = out[:i], out[i+2:]
		} else {
			line, out = out, nil
		}
		writeBodyLine(b, line)
		b.WriteString("\r\n")
	}
	if body != "" && !strings.HasSuffix(body, "\n") {
		// The encoder ended the last line without a line break; turn the
		// break just written into a soft one so it decodes to nothing.
		b.Truncate(b.Len() - 2)
		b.WriteString("=\r\n")
	}
}

// writeBodyLine writes one encoded line, escaping its first character when
// the line would otherwise match ^>*From : mbox readers quote or mistake
// such lines, and an escape keeps the decoded text the same.
func writeBodyLine(b *bytes.Buffer, line []byte) {
	for mboxSensitive(line) {
		esc := "=3E"
		if line[0] == 'F' {
			esc = "=46"
		}
		rest := line[1:]
		if len(esc)+len(rest) <= maxQPLine {
			b.WriteString(esc)
			b.Write(rest)
			return
		}
		// Too long with the escape: put it on a line of its own, joined
		// to the rest by a soft line break, and check the rest again.
		b.WriteString(esc)
		b.WriteString("=\r\n")
		line = rest
	}
	b.Write(line)
}

// mboxSensitive reports whether line matches ^>*From .
func mboxSensitive(line []byte) bool {
	return bytes.HasPrefix(bytes.TrimLeft(line, ">"), []byte("From "))
}
