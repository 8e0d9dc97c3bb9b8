package webhook

import (
	"errors"
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

var update = flag.Bool("update", false, "rewrite the guard's table in docs/design.md")

// guardHeading is the section of docs/design.md whose table is the guard's.
const guardHeading = "## SSRF guard (webhook destinations)"

// guardTable renders guardRules as the Markdown table docs/design.md holds.
func guardTable() string {
	var b strings.Builder
	b.WriteString("| Range | What it is | The guard |\n|---|---|---|\n")
	for _, r := range guardRules {
		decision := "refused: " + r.reason
		if r.act == embeddedIPv4 {
			decision = "judged as the IPv4 address in its last 32 bits"
		}
		b.WriteString("| `" + r.prefix.String() + "` | " + r.what + " | " + decision + " |\n")
	}
	return b.String()
}

// TestGuardDoc holds the table in docs/design.md to guardRules; -update
// rewrites it.
func TestGuardDoc(t *testing.T) {
	path := filepath.Join("..", "..", "..", "docs", "design.md")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(b)
	h := strings.Index(doc, "\n"+guardHeading+"\n")
	require.GreaterOrEqual(t, h, 0, "docs/design.md has no %q section", guardHeading)
	start := strings.Index(doc[h:], "\n| Range |")
	require.GreaterOrEqual(t, start, 0, "the %q section has no table", guardHeading)
	start += h + 1
	end := start
	for end < len(doc) && doc[end] == '|' {
		end += strings.Index(doc[end:], "\n") + 1
	}
	want := guardTable()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(doc[:start]+want+doc[end:]), 0o644))
		return
	}
	require.Equal(t, want, doc[start:end],
		"docs/design.md's guard table is stale: go test ./internal/sender/webhook -run TestGuardDoc -update")
}

// The guard holds on the address dialled, for the new ranges too: a
// request that skips the check of "to" (as one to a name that resolves
// there would) is refused by the dialer's Control before any connect.
func TestGuardAtDial(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	for to, reason := range map[string]string{
		"http://[64:ff9b:1::a9fe:a9fe]:80/": "local-use NAT64",
		"http://[64:ff9b::7f00:1]:9/":       "loopback",
		"http://[2002:7f00:1::]:9/":         "6to4",
		"http://[::ffff:0:7f00:1]:9/":       "IPv4-translated (SIIT)",
		"http://[fec0::1]:9/":               "site-local (deprecated)",
		"http://[2001::1]:9/":               "Teredo",
		"http://198.18.0.1:9/":              "benchmarking",
	} {
		u, err := url.Parse(to)
		require.NoError(t, err)
		err = s.post(t.Context(), u, "msg_g", `{}`)
		var refused *RefusedError
		require.True(t, errors.As(err, &refused), "%s: %v", to, err)
		require.Equal(t, reason, refused.Reason, to)
		require.True(t, notify.IsPermanent(err), "%s: %v", to, err)
	}
}
