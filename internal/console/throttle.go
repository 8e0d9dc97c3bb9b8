package console

import (
	"container/list"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// LoginLimit is a token bucket of login attempts: Burst at once, then one
// more every Every. A login that gives the right token is handed back its
// turn, so in effect only failed logins count.
type LoginLimit struct {
	Every time.Duration
	Burst int
}

// The default limits. One address may fail 10 times at once, then once
// every 30 seconds (120 an hour): an operator's typos never meet it, a
// guesser gets a few thousand tries a day. All addresses together may fail
// 100 times at once, then once a second: what an attacker with many
// addresses gets, and the point past which every login waits.
var (
	DefaultLoginPerAddress = LoginLimit{Every: 30 * time.Second, Burst: 10}
	DefaultLoginGlobal     = LoginLimit{Every: time.Second, Burst: 100}
)

// DefaultLoginAddresses is how many client addresses the per-address limit
// remembers; past it the least recently seen is forgotten (and would start
// afresh), so that no number of addresses grows the memory. The global
// limit holds whoever rotates addresses.
const DefaultLoginAddresses = 4096

func (l LoginLimit) orDefault(d LoginLimit) LoginLimit {
	if l.Every == 0 && l.Burst == 0 {
		return d
	}
	return l
}

func (l LoginLimit) validate(name string) error {
	if l.Every <= 0 || l.Burst < 1 {
		return fmt.Errorf("%s login limit: want a positive interval and a burst of at least 1, got %s and %d", name, l.Every, l.Burst)
	}
	return nil
}

// bucket is a token bucket of one LoginLimit: full at first, one token
// back every Every, never more than Burst. Its throttle's mutex guards it.
type bucket struct {
	tokens float64
	last   time.Time
}

func newBucket(l LoginLimit, now time.Time) *bucket {
	return &bucket{tokens: float64(l.Burst), last: now}
}

// take takes a token at now, or says how long until one is there.
func (b *bucket) take(l LoginLimit, now time.Time) time.Duration {
	if now.After(b.last) {
		b.tokens = min(float64(l.Burst), b.tokens+float64(now.Sub(b.last))/float64(l.Every))
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(l.Every))
}

// giveBack returns a token taken.
func (b *bucket) giveBack(l LoginLimit) { b.tokens = min(float64(l.Burst), b.tokens+1) }

// loginThrottle limits login attempts per client address and over all.
type loginThrottle struct {
	per, all LoginLimit
	max      int
	mu       sync.Mutex
	global   *bucket
	byAddr   map[string]*list.Element // of *addrBucket
	recent   *list.List               // most recently used first
	failed   prometheus.Counter
	limited  *prometheus.CounterVec
	// logLim bounds the WARN lines of throttled logins; quiet counts those
	// left out since the last line.
	logLim *rate.Limiter
	quiet  atomic.Int64
}

type addrBucket struct {
	key string
	b   *bucket
}

func newLoginThrottle(per, global LoginLimit, maxAddrs int, reg prometheus.Registerer) (*loginThrottle, error) {
	t := &loginThrottle{
		per: per, all: global, max: maxAddrs, global: newBucket(global, time.Now()),
		byAddr: map[string]*list.Element{}, recent: list.New(), logLim: rate.NewLimiter(rate.Every(10*time.Second), 3),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_console_login_failures_total",
			Help: "Console logins refused for a wrong token.",
		}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_console_login_throttled_total",
			Help: "Console logins answered 429 before the token was checked, by the limit that was reached: address or global.",
		}, []string{"limit"}),
	}
	t.limited.WithLabelValues("address")
	t.limited.WithLabelValues("global")
	if reg != nil {
		for _, c := range []prometheus.Collector{t.failed, t.limited} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register console metrics: %w", err)
			}
		}
	}
	return t, nil
}

// clientKey is the address a login is counted against: the connection's
// peer (RemoteAddr; X-Forwarded-For is not trusted, since any client can
// send it), an IPv6 address by its /64, the least a single host is given.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.String()
	}
	return a.String()
}

// addrBucketLocked is the address's bucket, made (and the least recently
// used one forgotten past the cap) when it has none. t.mu is held.
func (t *loginThrottle) addrBucketLocked(key string, now time.Time) *bucket {
	if e, ok := t.byAddr[key]; ok {
		t.recent.MoveToFront(e)
		return e.Value.(*addrBucket).b
	}
	for t.recent.Len() >= t.max {
		old := t.recent.Back()
		t.recent.Remove(old)
		delete(t.byAddr, old.Value.(*addrBucket).key)
	}
	b := &addrBucket{key: key, b: newBucket(t.per, now)}
	t.byAddr[key] = t.recent.PushFront(b)
	return b.b
}

// loginTurn is one login's token from both buckets; give it back when the
// token was right.
type loginTurn struct {
	t    *loginThrottle
	addr *bucket
}

func (l loginTurn) giveBack() {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	l.addr.giveBack(l.t.per)
	l.t.global.giveBack(l.t.all)
}

// take takes a turn for a login from r now, or says how long to wait and
// which limit was reached. A turn is taken before the token is compared,
// so that attempts sent at once cannot all pass.
func (t *loginThrottle) take(r *http.Request) (turn loginTurn, wait time.Duration, limit string) {
	key := clientKey(r)
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	addr := t.addrBucketLocked(key, now)
	if d := addr.take(t.per, now); d > 0 {
		t.limited.WithLabelValues("address").Inc()
		return loginTurn{}, d, "address"
	}
	if d := t.global.take(t.all, now); d > 0 {
		addr.giveBack(t.per)
		t.limited.WithLabelValues("global").Inc()
		return loginTurn{}, d, "global"
	}
	return loginTurn{t: t, addr: addr}, 0, ""
}

// logThrottled logs a throttled login as a WARN, a few every ten seconds
// at most, each line with the number left out before it.
func (t *loginThrottle) logThrottled(log *slog.Logger, r *http.Request, limit string, retryAfter int) {
	if !t.logLim.Allow() {
		t.quiet.Add(1)
		return
	}
	log.WarnContext(r.Context(), "console: login throttled", "limit", limit, "remote", r.RemoteAddr, "retry_after", retryAfter,
		"suppressed", t.quiet.Swap(0))
}
