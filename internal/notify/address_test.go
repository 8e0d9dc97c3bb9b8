package notify_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
)

func TestSMTPAddress(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, ascii string
		utf8      bool
		bad       bool
	}{
		{in: "ann@example.org", ascii: "ann@example.org"},
		{in: "Ann@Example.ORG", ascii: "Ann@Example.ORG"},
		{in: "user@bücher.de", ascii: "user@xn--bcher-kva.de"},
		{in: "user@BÜCHER.de", ascii: "user@xn--bcher-kva.de"},
		{in: "用户@例子.测试", ascii: "用户@xn--fsqu00a.xn--0zwm56d", utf8: true},
		{in: "jörg@example.org", ascii: "jörg@example.org", utf8: true},
		{in: "a@[192.0.2.1]", ascii: "a@[192.0.2.1]"},
		{in: "a@bü_cher.de", bad: true},
		{in: "a@-bücher.de", bad: true},
		{in: "no-domain", bad: true},
	} {
		ascii, utf8, err := notify.SMTPAddress(c.in)
		if c.bad {
			require.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.ascii, ascii, c.in)
		require.Equal(t, c.utf8, utf8, c.in)
	}

	// The API refuses a domain IDNA refuses, and takes a valid one.
	req := notify.CreateRequest{UserID: "u", Channel: notify.ChannelEmail, To: "a@bü_cher.de", Subject: "s", Body: "b"}
	err := notify.ValidateEmail(req)
	var fe *notify.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "to", fe.Field)
	req.To = "Ann <ann@bücher.de>"
	require.NoError(t, notify.ValidateEmail(req))
}
