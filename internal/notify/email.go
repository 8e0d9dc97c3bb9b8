package notify

import "strings"

// MessageID is the Message-ID of every email of notification id (FormatID's
// text): "<ID@DOMAIN>", angle brackets included, DOMAIN the domain of the
// configured From address (localhost when it has none). Every attempt at
// the same notification carries the same one, so a repeat is detectable
// downstream; the console shows it.
func MessageID(id, from string) string {
	domain := "localhost"
	if addr, err := ParseAddress(from); err == nil {
		if i := strings.LastIndexByte(addr, '@'); i >= 0 && i+1 < len(addr) {
			domain = addr[i+1:]
		}
	}
	return "<" + id + "@" + domain + ">"
}
