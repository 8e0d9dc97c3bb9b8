// Package smtp delivers emails to an SMTP server (HERALD_SMTP_URL).
//
// TLS: smtp:// upgrades the session with STARTTLS (?tls=required, the
// default whenever the URL holds credentials, or ?tls=opportunistic, the
// default otherwise, or ?tls=none); smtps:// speaks TLS from the first byte.
// Certificates are always verified, against the system's roots plus
// Config.CAFile; there is no way to skip it. Credentials go out over TLS
// only (AUTH PLAIN, or LOGIN where PLAIN is not offered).
//
// A session says EHLO once, and once more after STARTTLS (RFC 3207); the
// EHLO whose reply tells whether STARTTLS is offered is the session's own
// when it goes on in clear: strict servers answer a second EHLO with 503.
//
// Sessions: a worker sends many emails to one server, and the dial,
// greeting, EHLO, STARTTLS and AUTH are most of a fresh session's round
// trips, so sessions are kept in a pool of at most Config.MaxSessions and
// reused. A session that failed in any way is closed, never reused, so no
// broken state carries over. A send waits for a free place in the pool on
// its caller's ctx, before its Timeout starts: a full pool is a local
// limit, which never fails a send by timing it out and is never the
// server's fault. This package has no rate limit of its own: whoever takes
// the messages (the worker) paces them before it claims one.
//
// Faults: every error of Send says whose fault the failure was, by the
// phase it happened in, which is what the worker decides on.
//
//   - Before MAIL FROM is written (dial, DNS, TLS handshake, greeting,
//     EHLO, STARTTLS, AUTH, no answer within the timeout) nothing of the
//     message has been handed over: the provider is down, marked
//     notify.SenderDown. The message spends no attempt; the worker stops
//     sending and probes (Sender.Probe) until the server is back. So is a
//     530 to MAIL: the server demands TLS or authentication this
//     configuration lacks.
//   - A 421 reply anywhere (greeting, EHLO, AUTH, MAIL, RCPT, DATA) is the
//     provider asking to slow down, marked notify.Throttled with no wait of
//     its own (SMTP carries no Retry-After): no attempt spent; the worker
//     backs off. A 421 to the MAIL of a kept session is taken first for a
//     session dropped while idle (below), and reported only when a fresh
//     session gets it too.
//   - Once MAIL FROM is sent the message is being handed over, and a
//     failure is this message's attempt: a 4xx reply, the connection
//     closed, reset or ended after MAIL, after RCPT, during DATA or while
//     awaiting the final reply, or no answer within the timeout, is a plain
//     error (retry, dead-letter after the last); a 5xx reply is
//     notify.Permanent (dead-letter at once). A server that drops the
//     connection because of one message thus dead-letters that message in
//     the end, instead of passing for an outage each time it comes back.
//
// A kept session the server closed while idle fails at its first command,
// MAIL, before the server could take it up; the send then runs once more on
// a fresh session, so that a stale session is neither the message's
// attempt nor an outage.
//
// Repeats: the message is rendered with the email's own Message-ID on
// every attempt (mail.Render). When the server took a message but its
// final 250 was lost with the connection, the send reads as failed and is
// retried; the copy that may arrive twice carries the same Message-ID, so
// the repeat is detectable downstream.
package smtp
