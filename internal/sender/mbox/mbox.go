// Package mbox delivers emails by appending them to an mbox file: the
// embedded mode's mailbox when no SMTP server is configured. Any mail client
// can open the file.
package mbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/sender/mail"
)

// separatorFrom is the envelope sender on each message's "From " line.
const separatorFrom = "herald@localhost"

// Sender appends emails to an mbox file in mboxrd format. It is safe for
// concurrent use; it assumes it is the only writer of the file.
type Sender struct {
	path string
	mu   sync.Mutex
}

// New returns a Sender appending to path, creating the file (mode 0600: mail
// is private) when it does not exist, so that a bad path fails at start-up
// rather than at the first send.
func New(path string) (*Sender, error) {
	if path == "" {
		return nil, fmt.Errorf("mbox: path is required")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open mbox: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("open mbox: %w", err)
	}
	// A file created just now survives a crash only once its directory
	// entry is on disk too.
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("open mbox: %w", err)
	}
	return &Sender{path: path}, nil
}

// Send appends e to the mbox and returns once it is on disk: the worker
// records the email as sent as soon as Send returns.
func (s *Sender) Send(ctx context.Context, e mail.Email) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mbox send: %w", err)
	}
	now := time.Now().UTC() // the Date header in UTC, whatever TZ says
	entry := Entry(mail.Render(e, now), now)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.appendEntry(entry); err != nil {
		return fmt.Errorf("mbox send: %w", err)
	}
	return nil
}

// appendEntry writes entry in one write and syncs it. If either fails, the
// file is cut back to its old length so that a torn entry cannot run into
// the next one.
func (s *Sender) appendEntry(entry []byte) (err error) {
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open mbox: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close mbox: %w", cerr)
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat mbox: %w", err)
	}
	if _, err := f.Write(entry); err != nil {
		_ = f.Truncate(fi.Size())
		return fmt.Errorf("append to mbox: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Truncate(fi.Size())
		return fmt.Errorf("sync mbox: %w", err)
	}
	return nil
}

// Entry turns an RFC 5322 message (CRLF or LF line endings) into one mboxrd
// entry: a "From " separator line dated date, the message with LF line
// endings and every line matching ^>*From  quoted with one more ">", and the
// blank line that ends the entry.
func Entry(msg []byte, date time.Time) []byte {
	msg = bytes.ReplaceAll(msg, []byte("\r\n"), []byte("\n"))
	var b bytes.Buffer
	b.Grow(len(msg) + len(msg)/64 + 64)
	b.WriteString("From " + separatorFrom + " " + date.UTC().Format(time.ANSIC) + "\n")
	for len(msg) > 0 {
		line := msg
		if i := bytes.IndexByte(msg, '\n'); i >= 0 {
			line, msg = msg[:i+1], msg[i+1:]
		} else {
			msg = nil
		}
		if bytes.HasPrefix(bytes.TrimLeft(line, ">"), []byte("From ")) {
			b.WriteByte('>')
		}
		b.Write(line)
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return b.Bytes()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
