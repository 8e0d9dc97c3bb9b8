package consume

import "unicode/utf8"

// MaxReason bounds the reason (the last error) a retry copy or a dead
// letter carries in its header or attribute.
const MaxReason = 1024

// Truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
