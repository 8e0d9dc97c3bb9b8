package bench_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/bench"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"median of four is the second", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of 100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p50 of 100", ms(hundred...), 50, 50 * time.Millisecond},
		{"max", ms(hundred...), 100, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, bench.Percentile(tc.sorted, tc.p))
		})
	}
}

func TestNotificationID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "42", bench.NotificationID("<42@example.com>"))
	require.Equal(t, "odd", bench.NotificationID("odd"))
}

// fakeAPI answers creates like herald's API and delivers each accepted one
// through send, after delay, from a goroutine of its own: the pipeline
// without a database, so the load generator can be tested alone.
type fakeAPI struct {
	next  atomic.Int64
	send  func(ctx context.Context, e notify.Outgoing) error
	delay time.Duration
	// reject, when set, answers every create whose number it returns true
	// for with 503.
	reject func(n int64) bool
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req notify.CreateRequest
	if r.Method != http.MethodPost || r.URL.Path != "/notifications" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate(notify.EmailOnly()) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	n := f.next.Add(1)
	if f.reject != nil && f.reject(n) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	id := strconv.FormatInt(n, 10)
	go func() {
		time.Sleep(f.delay) // the simulated pipeline's latency, not a synchronisation
		_ = f.send(context.Background(), notify.Outgoing{NotificationID: id, UserID: req.UserID, Channel: req.Channel, To: req.To, Subject: req.Subject, Body: req.Body})
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%q,"status":"pending"}`, id)
}

// setup starts a real SMTP sink, a real SMTP sender wrapped by a Recorder,
// and the fake API delivering through it.
func setup(t *testing.T, delay time.Duration) (*fakeAPI, *httptest.Server, *smtptest.Server, *bench.Recorder) {
	t.Helper()
	sink := smtptest.Start(t)
	snd, err := smtp.New(smtp.Config{URL: sink.URL(), MaxIdle: 4})
	require.NoError(t, err)
	rec := bench.NewRecorder()
	email, err := mail.NewSender("herald@bench.test", snd)
	require.NoError(t, err)
	f := &fakeAPI{send: rec.Sender(email).Send, delay: delay}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv, sink, rec
}

func TestRunClosedLoop(t *testing.T) {
	t.Parallel()
	_, srv, sink, rec := setup(t, 20*time.Millisecond)
	res, err := bench.Run(t.Context(), rec, bench.Config{URL: srv.URL, N: 120, Concurrency: 6, Sink: sink.CountByMessageID})
	require.NoError(t, err)
	require.Equal(t, 120, res.Accepted)
	require.Equal(t, 120, res.Delivered)
	require.Equal(t, 120, sink.Count())
	require.Empty(t, res.Rejected)
	require.Greater(t, res.APIPerSec, 0.0)
	require.Greater(t, res.DeliveredPerSec, 0.0)
	require.LessOrEqual(t, res.APIP50, res.APIP99)
	// Every email left 20ms after its create was answered, so no e2e
	// latency can be shorter (the reply races the delivery by far less).
	require.GreaterOrEqual(t, res.E2EP50, 15*time.Millisecond)
	require.LessOrEqual(t, res.E2EP50, res.E2EP99)
	require.LessOrEqual(t, res.E2EP99, res.E2EMax)
	require.Greater(t, res.Drain, time.Duration(0))
	require.Zero(t, res.Published, "no relay ran")
}

func TestRunOpenLoopKeepsTheRate(t *testing.T) {
	t.Parallel()
	_, srv, sink, rec := setup(t, 0)
	start := time.Now()
	res, err := bench.Run(t.Context(), rec, bench.Config{URL: srv.URL, N: 60, Concurrency: 8, Rate: 200, Sink: sink.CountByMessageID})
	require.NoError(t, err)
	require.Equal(t, 60, res.Accepted)
	// 60 creates at 200/s are scheduled over 295ms: a closed loop would
	// finish far sooner.
	require.GreaterOrEqual(t, time.Since(start), 290*time.Millisecond)
	// The rate holds from above; a loaded machine may lag behind the
	// schedule, so there is no bound from below.
	require.Less(t, res.APIPerSec, 230.0)
}

func TestRunCountsRejections(t *testing.T) {
	t.Parallel()
	f, srv, sink, rec := setup(t, 0)
	f.reject = func(n int64) bool { return n%4 == 0 }
	res, err := bench.Run(t.Context(), rec, bench.Config{URL: srv.URL, N: 40, Concurrency: 4, Sink: sink.CountByMessageID})
	require.NoError(t, err)
	require.Equal(t, 30, res.Accepted)
	require.Equal(t, map[int]int{http.StatusServiceUnavailable: 10}, res.Rejected)
	report := bench.NewReport("sqlite", "table", bench.Config{N: 40, Concurrency: 4}, res, bench.Ceilings{TxPerSec: 1000})
	require.Equal(t, 10, report.Rejected)
	require.Contains(t, report.Notes, "rejected creates by status: 503: 10")
	require.InDelta(t, res.APIPerSec/1000, report.APIVsRawTx, 0.001)
}

func TestRunFailsWhenDeliveryStalls(t *testing.T) {
	t.Parallel()
	f, srv, _, rec := setup(t, 0)
	f.send = func(context.Context, notify.Outgoing) error { return errors.New("never delivered") }
	_, err := bench.Run(t.Context(), rec, bench.Config{URL: srv.URL, N: 5, Concurrency: 2, Stall: 200 * time.Millisecond})
	require.ErrorContains(t, err, "stalled: 0 of 5")
}

func TestRunFailsWhenTheSinkMissesMail(t *testing.T) {
	t.Parallel()
	f, srv, sink, rec := setup(t, 0)
	// A sender that claims success without reaching the SMTP server.
	liar := rec.Sender(senderFunc(func(context.Context, notify.Outgoing) error { return nil }))
	f.send = liar.Send
	_, err := bench.Run(t.Context(), rec, bench.Config{URL: srv.URL, N: 5, Concurrency: 2, Sink: sink.CountByMessageID})
	require.ErrorContains(t, err, "misses 5 of 5")
}

func TestRunFailsWhenNothingIsAccepted(t *testing.T) {
	t.Parallel()
	f, srv, _, rec := setup(t, 0)
	f.reject = func(int64) bool { return true }
	_, err := bench.Run(t.Context(), rec, bench.Config{URL: srv.URL, N: 3, Concurrency: 1})
	require.ErrorContains(t, err, "no create was accepted")
}

type senderFunc func(context.Context, notify.Outgoing) error

func (f senderFunc) Send(ctx context.Context, e notify.Outgoing) error { return f(ctx, e) }

type publisherFunc func(context.Context, []notify.Event) ([]int64, error)

func (f publisherFunc) Publish(ctx context.Context, ev []notify.Event) ([]int64, error) {
	return f(ctx, ev)
}

func TestRecorderCountsConfirmedEvents(t *testing.T) {
	t.Parallel()
	rec := bench.NewRecorder()
	pub := rec.Publisher(publisherFunc(func(_ context.Context, ev []notify.Event) ([]int64, error) {
		// The broker confirmed all but the last.
		ids := make([]int64, 0, len(ev))
		for _, e := range ev[:len(ev)-1] {
			ids = append(ids, e.ID)
		}
		return ids, errors.New("last one returned")
	}))
	_, err := pub.Publish(t.Context(), []notify.Event{{ID: 1}, {ID: 2}, {ID: 3}})
	require.Error(t, err)
	require.EqualValues(t, 2, rec.Published())
}

func TestReportJSONFields(t *testing.T) {
	t.Parallel()
	r := bench.NewReport("postgres", "rabbitmq", bench.Config{}, bench.Result{
		Accepted: 10, Delivered: 10, APIPerSec: 500, RelayPerSec: 400, Published: 10, RelayBatches: 2,
		APIP50: 1500 * time.Microsecond, Drain: 1500 * time.Millisecond,
	}, bench.Ceilings{TxPerSec: 1000, PublishPerSec: 2000})
	var b []byte
	w := writerFunc(func(p []byte) (int, error) { b = append(b, p...); return len(p), nil })
	require.NoError(t, r.WriteJSON(w))
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, f := range []string{"api_per_s", "api_p50_ms", "api_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "e2e_max_ms",
		"relay_per_s", "delivered_per_s", "drain_s", "raw_tx_per_s", "raw_publish_per_s", "api_vs_raw_tx", "relay_vs_raw_publish",
		"channel", "receiver_latency_ms", "raw_post_per_s", "raw_post_clients", "delivered_vs_raw_post"} {
		require.Contains(t, m, f)
	}
	require.Equal(t, 20000.0, m["n"], "defaults apply")
	require.Equal(t, "email", m["channel"], "defaults apply")
	require.Zero(t, m["raw_post_per_s"])
	require.Equal(t, 1.5, m["api_p50_ms"])
	require.Equal(t, 1.5, m["drain_s"])
	require.Equal(t, 0.5, m["api_vs_raw_tx"])
	require.Equal(t, 0.2, m["relay_vs_raw_publish"])
	require.NoError(t, r.WriteText(io.Discard))
}

// A webhook report names its channel in JSON and in every row that
// counts deliveries, and sets the raw POST ceiling beside delivered/s.
func TestReportWebhook(t *testing.T) {
	t.Parallel()
	r := bench.NewReport("sqlite", "table", bench.Config{Channel: bench.ChannelWebhook, To: "http://127.0.0.1:1/hook"}, bench.Result{
		Accepted: 10, Delivered: 10, DeliveredPerSec: 300,
	}, bench.Ceilings{TxPerSec: 1000, POSTPerSec: 1200, POSTClients: 32})
	r.ReceiverLatencyMs = 100
	require.Equal(t, "webhook", r.Channel)
	require.Equal(t, 1200.0, r.RawPOSTPerSec)
	require.Equal(t, 32, r.RawPOSTClients)
	require.Equal(t, 0.25, r.DeliveredVsRawPOST)
	var b strings.Builder
	require.NoError(t, r.WriteText(&b))
	text := b.String()
	require.Contains(t, text, "sqlite + table, channel webhook,")
	require.Regexp(t, `delivered +10 +webhooks the webhook receiver accepted`, text)
	require.Regexp(t, `raw_post_per_s +1200.0 +bare POSTs of the same bodies to the receiver per second, 32 at once`, text)
	require.Regexp(t, `delivered_vs_raw_post +0.250`, text)
	require.Regexp(t, `receiver_latency_ms +100 `, text)
	require.NotContains(t, text, "email")

	b.Reset()
	r = bench.NewReport("sqlite", "table", bench.Config{}, bench.Result{Accepted: 1, Delivered: 1}, bench.Ceilings{})
	require.NoError(t, r.WriteText(&b))
	require.Contains(t, b.String(), "channel email,")
	require.NotContains(t, b.String(), "raw_post_per_s", "no POST ceiling on email")
}

// A run on another channel than email needs a destination.
func TestRunNeedsADestination(t *testing.T) {
	t.Parallel()
	_, err := bench.Run(t.Context(), bench.NewRecorder(), bench.Config{URL: "http://127.0.0.1:1", N: 1, Channel: bench.ChannelWebhook})
	require.ErrorContains(t, err, "the webhook channel needs a destination")
	_, err = bench.Run(t.Context(), bench.NewRecorder(), bench.Config{URL: "http://127.0.0.1:1", N: 1, Channel: "sms", To: "x"})
	require.ErrorContains(t, err, "channel must be one of")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// The benchmarks below measure herald's hot paths one call at a time, on the
// real databases: `make bench` runs them with -benchmem.

func request(i int) notify.CreateRequest {
	return notify.CreateRequest{
		UserID:  fmt.Sprintf("bench-%d", i),
		Channel: notify.ChannelEmail,
		To:      "bench@example.com",
		Subject: fmt.Sprintf("herald bench %d", i),
		Body:    "Hello,\nthis is a notification sent by herald bench to measure the stack.\n",
	}
}

func postgresStore(b *testing.B) (*postgres.Store, string) {
	b.Helper()
	dbURL := testenv.PostgresURL(b)
	s, err := postgres.Open(b.Context(), dbURL, postgres.Config{})
	require.NoError(b, err)
	b.Cleanup(s.Close)
	require.NoError(b, s.Migrate(b.Context()))
	return s, dbURL
}

func sqliteStore(b *testing.B) *sqlite.Store {
	b.Helper()
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	require.NoError(b, s.Migrate(b.Context()))
	return s
}

// BenchmarkCreate is the create transaction (notification, outbox event,
// commit) one at a time, and from 8 goroutines per CPU at once, where
// commits can share a flush.
func BenchmarkCreate(b *testing.B) {
	type creator interface {
		Create(context.Context, notify.NewNotification) (notify.Created, error)
	}
	for _, engine := range []string{"postgres", "sqlite"} {
		b.Run(engine, func(b *testing.B) {
			var s creator
			if engine == "postgres" {
				s, _ = postgresStore(b)
			} else {
				s = sqliteStore(b)
			}
			var n atomic.Int64
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.Create(b.Context(), notify.NewNotification{Request: request(int(n.Add(1)))}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Create(b.Context(), notify.NewNotification{Request: request(int(n.Add(1)))}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
	}
}

// fillOutbox inserts n unprocessed outbox rows straight in SQL: the
// benchmark measures relaying them, not writing them.
func fillOutbox(b *testing.B, dbURL string, n int) {
	b.Helper()
	ctx := b.Context()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(b, err)
	defer conn.Close(ctx)
	payload, err := json.Marshal(notify.NewRequested(notify.Notification{ID: 1, UserID: "u", Channel: "email", To: "bench@example.com", Subject: "s", Body: "b"}))
	require.NoError(b, err)
	_, err = conn.Exec(ctx, `INSERT INTO outbox (event_type, payload) SELECT $1, $2 FROM generate_series(1, $3)`,
		notify.EventRequested, payload, n)
	require.NoError(b, err)
}

// BenchmarkRelayBatch is one relay transaction of 100 rows on PostgreSQL:
// claim with SKIP LOCKED, a publish that confirms everything at once, mark
// processed, commit. The broker's share is measured by herald bench.
func BenchmarkRelayBatch(b *testing.B) {
	s, dbURL := postgresStore(b)
	confirmAll := func(_ context.Context, ev []notify.Event) ([]int64, error) {
		ids := make([]int64, len(ev))
		for i, e := range ev {
			ids[i] = e.ID
		}
		return ids, nil
	}
	b.Run("batch100", func(b *testing.B) {
		fillOutbox(b, dbURL, 100*b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			n, err := relay.Batch(b.Context(), s, 100, nil, confirmAll)
			if err != nil || n != 100 {
				b.Fatalf("relay batch: %d rows, %v", n, err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkDeliver is the worker's delivery transaction on PostgreSQL with a
// send that does nothing: record the message id, lock the notification,
// mark it sent, commit.
func BenchmarkDeliver(b *testing.B) {
	s, dbURL := postgresStore(b)
	var msgID atomic.Int64
	noop := func(context.Context) error { return nil }
	b.Run("noop-send", func(b *testing.B) {
		ctx := b.Context()
		conn, err := pgx.Connect(ctx, dbURL)
		require.NoError(b, err)
		rows, err := conn.Query(ctx, `
INSERT INTO notifications (user_id, channel, recipient, subject, body)
SELECT 'u', 'email', 'bench@example.com', 's', 'b' FROM generate_series(1, $1)
RETURNING id`, b.N)
		require.NoError(b, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(b, err)
		require.NoError(b, conn.Close(ctx))
		b.ReportAllocs()
		b.ResetTimer()
		for _, id := range ids {
			out, err := deliverytest.Deliver(ctx, s, msgID.Add(1), id, noop)
			if err != nil || out != notify.OutcomeSent {
				b.Fatalf("deliver: %s, %v", out, err)
			}
		}
	})
}

func TestRecorderReset(t *testing.T) {
	t.Parallel()
	rec := bench.NewRecorder()
	snd := rec.Sender(nopSender{})
	require.NoError(t, snd.Send(context.Background(), notify.Outgoing{NotificationID: "1"}))
	require.Equal(t, 1, rec.Sent())
	rec.Reset()
	require.Zero(t, rec.Sent())
	require.NoError(t, snd.Send(context.Background(), notify.Outgoing{NotificationID: "2"}))
	require.Equal(t, 1, rec.Sent())
}

type nopSender struct{}

func (nopSender) Send(context.Context, notify.Outgoing) error { return nil }

// The report divides the database's activity by the notifications
// delivered, and leaves it null when it was not measured.
func TestReportActivity(t *testing.T) {
	t.Parallel()
	res := bench.Result{Accepted: 200, Delivered: 200, DeliveredPerSec: 300}
	r := bench.NewReport("postgres", "table", bench.Config{}, res, bench.Ceilings{TxPerSec: 1000, PipelinePerSec: 600})
	require.Nil(t, r.RowsPerNotification)
	require.Equal(t, 600.0, r.RawPipelinePerSec)
	require.Equal(t, 0.5, r.DeliveredVsRawPipeline)
	r.SetActivity(bench.Activity{Rows: 2000, RowsByTable: map[string]int64{"outbox": 600, "notifications": 1400}, Commits: 850, WALBytes: 2_000_001})
	require.Equal(t, 10.0, *r.RowsPerNotification)
	require.Equal(t, 4.25, *r.CommitsPerNotification)
	require.Equal(t, 10000.0, *r.WALBytesPerNotification)
	require.Contains(t, r.Notes[len(r.Notes)-1], "notifications 7.00, outbox 3.00")
	var b []byte
	require.NoError(t, r.WriteJSON(writerFunc(func(p []byte) (int, error) { b = append(b, p...); return len(p), nil })))
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, 10.0, m["rows_per_notification"])
	require.NoError(t, r.WriteText(io.Discard))
	// Not measured: null, not 0.
	r = bench.NewReport("sqlite", "table", bench.Config{}, res, bench.Ceilings{})
	b = nil
	require.NoError(t, r.WriteJSON(writerFunc(func(p []byte) (int, error) { b = append(b, p...); return len(p), nil })))
	require.Contains(t, string(b), `"rows_per_notification":null`)
}
