package notify

import (
	"fmt"
	"strings"

	"golang.org/x/net/idna"
)

// SMTPAddress prepares a bare address (ParseAddress's result) for SMTP. It
// returns the address with its domain in ASCII (a Unicode domain converted
// to IDNA A-labels, "bücher.de" to "xn--bcher-kva.de"; an ASCII domain or a
// domain literal kept as given) and whether its local part is not ASCII:
// such an address can only go to a server that offers SMTPUTF8 (RFC 6531).
// A Unicode domain that IDNA refuses is an error.
func SMTPAddress(addr string) (ascii string, utf8Local bool, err error) {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return "", false, fmt.Errorf("address %q has no domain", addr)
	}
	local, domain := addr[:at], addr[at+1:]
	utf8Local = !isASCII(local)
	if isASCII(domain) {
		return addr, utf8Local, nil
	}
	d, err := idna.Lookup.ToASCII(domain)
	if err != nil {
		return "", false, fmt.Errorf("domain %q is not a valid internationalized domain name: %v", domain, err)
	}
	return local + "@" + d, utf8Local, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
