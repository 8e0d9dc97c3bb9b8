package consume

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

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

// SampleIDs lists the first few of ids (message or event ids) for an error
// message, with how many more there are.
func SampleIDs(ids []string) string {
	const max = 5
	if len(ids) <= max {
		return "ids " + strings.Join(ids, ", ")
	}
	return "ids " + strings.Join(ids[:max], ", ") + " and " + strconv.Itoa(len(ids)-max) + " more"
}
