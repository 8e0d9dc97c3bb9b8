package mbox_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	heraldmail "github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/mbox"
)

var _ heraldmail.EmailSender = (*mbox.Sender)(nil)

var separator = regexp.MustCompile(`^From herald@localhost (Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d \d{4}$`)

// readMbox splits an mboxrd file into its messages, the way a reader does:
// a message starts at a "From " line that follows a blank line (or starts
// the file), loses the blank line before the next separator, and has one
// ">" taken off every line matching ^>+From .
func readMbox(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	if len(data) == 0 {
		return nil
	}
	require.True(t, bytes.HasSuffix(data, []byte("\n\n")), "mbox must end with a blank line")
	lines := strings.SplitAfter(string(data), "\n")
	var msgs [][]byte
	var cur *bytes.Buffer
	prevBlank := true
	for _, line := range lines {
		if line == "" {
			continue
		}
		if prevBlank && strings.HasPrefix(line, "From ") {
			require.Regexp(t, separator, strings.TrimSuffix(line, "\n"))
			if cur != nil {
				msgs = append(msgs, bytes.TrimSuffix(cur.Bytes(), []byte("\n")))
			}
			cur = new(bytes.Buffer)
			prevBlank = false
			continue
		}
		require.NotNil(t, cur, "data before the first separator")
		prevBlank = line == "\n"
		if strings.HasPrefix(strings.TrimLeft(line, ">"), "From ") {
			require.True(t, strings.HasPrefix(line, ">"), "unquoted From line %q", line)
			line = line[1:]
		}
		cur.WriteString(line)
	}
	msgs = append(msgs, bytes.TrimSuffix(cur.Bytes(), []byte("\n")))
	return msgs
}

type parsed struct {
	MessageID, Subject, From, To, Body string
}

func parse(t *testing.T, raw []byte) parsed {
	t.Helper()
	require.NotContains(t, string(raw), "\r", "mbox messages use LF line endings")
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	require.NoError(t, err)
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	require.NoError(t, err)
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	require.NoError(t, err)
	return parsed{
		MessageID: msg.Header.Get("Message-ID"),
		Subject:   subject,
		From:      msg.Header.Get("From"),
		To:        msg.Header.Get("To"),
		Body:      string(body),
	}
}

func lf(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

func newSender(t *testing.T) (*mbox.Sender, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.mbox")
	s, err := mbox.New(path)
	require.NoError(t, err)
	return s, path
}

func TestSendRoundTrips(t *testing.T) {
	t.Parallel()
	s, path := newSender(t)
	bodies := []string{
		"Hello.\nBye.\n",
		"From the start\n>From quoted\n>>From twice\nnot From here\n",
		".\n..\n.\nend",
		"CRLF\r\nbody\r\n\r\n",
		"",
		"no final break",
		"\n\nFrom \n\n",
		strings.Repeat("long line é ", 200),
		"From " + strings.Repeat("x", 200) + "\n>From " + strings.Repeat("y", 200),
	}
	var want []parsed
	for i, body := range bodies {
		if body == "" {
			body = " " // the smallest body validation lets through
		}
		e := heraldmail.Email{
			MessageID: fmt.Sprintf("<%d@example.com>", i+1),
			From:      "Herald <herald@example.com>",
			To:        "ann@example.org",
			Subject:   fmt.Sprintf("Nachricht %d für dich", i+1),
			Body:      body,
		}
		require.NoError(t, s.Send(context.Background(), e))
		want = append(want, parsed{
			MessageID: e.MessageID, Subject: e.Subject, From: e.From, To: e.To, Body: lf(body),
		})
	}

	// mail.Render never emits a line an mbox writer must quote, so readers that
	// do not unquote (mboxo, such as Python's mailbox) read the same bodies.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotRegexp(t, `(?m)^>+From `, string(data))

	msgs := readMbox(t, path)
	require.Len(t, msgs, len(want))
	for i, raw := range msgs {
		require.Equal(t, want[i], parse(t, raw), "message %d", i+1)
	}
}

func TestSendConcurrent(t *testing.T) {
	t.Parallel()
	s, path := newSender(t)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- s.Send(context.Background(), heraldmail.Email{
				MessageID: fmt.Sprintf("<%d@example.com>", i),
				From:      "herald@example.com",
				To:        "ann@example.org",
				Subject:   "s",
				Body:      strings.Repeat(fmt.Sprintf("line %d\nFrom %d\n", i, i), 50),
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	seen := map[string]bool{}
	for _, raw := range readMbox(t, path) {
		p := parse(t, raw)
		var i int
		_, err := fmt.Sscanf(p.MessageID, "<%d@example.com>", &i)
		require.NoError(t, err)
		require.Equal(t, strings.Repeat(fmt.Sprintf("line %d\nFrom %d\n", i, i), 50), p.Body)
		seen[p.MessageID] = true
	}
	require.Len(t, seen, n)
}

func TestEntryQuotes(t *testing.T) {
	t.Parallel()
	date := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	msg := "Subject: x\r\n\r\nFrom a\r\n>From b\r\n>>From c\r\nFrom\r\n From d\r\nx From e"
	got := string(mbox.Entry([]byte(msg), date))
	require.Equal(t, "From herald@localhost Fri Jan  2 15:04:05 2026\n"+
		"Subject: x\n\n>From a\n>>From b\n>>>From c\nFrom\n From d\nx From e\n\n", got)
}

func TestNew(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := mbox.New(filepath.Join(dir, "missing", "herald.mbox"))
	require.Error(t, err)
	_, err = mbox.New("")
	require.Error(t, err)

	path := filepath.Join(dir, "herald.mbox")
	_, err = mbox.New(path)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.Zero(t, fi.Size())

	// An existing mailbox is appended to, never truncated.
	require.NoError(t, os.WriteFile(path, []byte("From x Fri Jan  2 15:04:05 2026\nSubject: old\n\nold\n\n"), 0o600))
	s, err := mbox.New(path)
	require.NoError(t, err)
	require.NoError(t, s.Send(context.Background(), heraldmail.Email{MessageID: "<1@x>", From: "a@x", To: "b@x", Subject: "new", Body: "new"}))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(data), "From x Fri Jan  2 15:04:05 2026\nSubject: old\n\nold\n\nFrom herald@localhost "))
}

func TestSendCancelled(t *testing.T) {
	t.Parallel()
	s, path := newSender(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Send(ctx, heraldmail.Email{MessageID: "<1@x>", From: "a@x", To: "b@x", Subject: "s", Body: "b"})
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, readMbox(t, path))
}
