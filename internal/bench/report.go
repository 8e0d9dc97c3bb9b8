package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Report is the outcome of herald bench; its JSON field names are what
// `herald bench --json` prints, and scripts compare them across runs.
type Report struct {
	Store     string `json:"store"`
	Transport string `json:"transport"`
	// Channel is the channel every create asked for (email, webhook,
	// telegram).
	Channel     string  `json:"channel"`
	N           int     `json:"n"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	Accepted    int     `json:"accepted"`
	Rejected    int     `json:"rejected"`
	Delivered   int     `json:"delivered"`

	APIPerSec float64 `json:"api_per_s"`
	APIP50ms  float64 `json:"api_p50_ms"`
	APIP99ms  float64 `json:"api_p99_ms"`

	E2EP50ms float64 `json:"e2e_p50_ms"`
	E2EP99ms float64 `json:"e2e_p99_ms"`
	E2EMaxms float64 `json:"e2e_max_ms"`

	RelayPerSec     float64 `json:"relay_per_s"`
	DeliveredPerSec float64 `json:"delivered_per_s"`
	DrainS          float64 `json:"drain_s"`

	// SMTPLatencyMs is the in-process SMTP sink's answer time to DATA
	// (--smtp-latency); SendsInFlightMax the most sends in progress at
	// once; DBConnsMax the most database connections the stack held at
	// once (PostgreSQL only; 0 on SQLite, see the notes).
	SMTPLatencyMs float64 `json:"smtp_latency_ms"`
	// ReceiverLatencyMs is the webhook receiver's (or Bot API's) answer
	// time to each POST (--receiver-latency); 0 on email.
	ReceiverLatencyMs float64 `json:"receiver_latency_ms"`
	SendsInFlightMax  int64   `json:"sends_in_flight_max"`
	DBConnsMax        int64   `json:"db_conns_max"`

	// Preload is the number of notifications already sent that the
	// scratch database held before the run (--preload); SeqScansPer1k the
	// sequential scans of herald's tables per 1,000 deliveries over the
	// warm-up and the measured run (PostgreSQL only; 0 on SQLite).
	Preload       int     `json:"preload"`
	SeqScansPer1k float64 `json:"seq_scans_per_1k_deliveries"`

	RawTxPerSec       float64 `json:"raw_tx_per_s"`
	RawPublishPerSec  float64 `json:"raw_publish_per_s"`
	APIVsRawTx        float64 `json:"api_vs_raw_tx"`
	RelayVsRawPublish float64 `json:"relay_vs_raw_publish"`

	// RawPipelinePerSec is the raw pipeline ceiling: notifications per
	// second taken through the store's statements for one notification,
	// bare (see raw.Pipeline); DeliveredVsRawPipeline is delivered_per_s
	// over it.
	RawPipelinePerSec      float64 `json:"raw_pipeline_per_s"`
	DeliveredVsRawPipeline float64 `json:"delivered_vs_raw_pipeline"`

	// RawPOSTPerSec is the raw HTTP POST ceiling of the channel's
	// receiver: as many POSTs as creates, of the same bodies, straight to
	// it from RawPOSTClients at once (see raw.POST); DeliveredVsRawPOST is
	// delivered_per_s over it. 0 on email.
	RawPOSTPerSec      float64 `json:"raw_post_per_s"`
	RawPOSTClients     int     `json:"raw_post_clients"`
	DeliveredVsRawPOST float64 `json:"delivered_vs_raw_post"`

	// RowsPerNotification, CommitsPerNotification and
	// WALBytesPerNotification are what the database did over the measured
	// run (warm-up and ceilings excluded) per notification delivered: rows
	// written to herald's tables, transactions committed, WAL bytes. null
	// when not measured (SQLite: see the notes).
	RowsPerNotification     *float64 `json:"rows_per_notification"`
	CommitsPerNotification  *float64 `json:"commits_per_notification"`
	WALBytesPerNotification *float64 `json:"wal_bytes_per_notification"`
	// HOTUpdateShare is the share of the measured run's updates that were
	// HOT (wrote no index entry); null when not measured.
	HOTUpdateShare *float64 `json:"hot_update_share"`

	// CPU*MsPerNotification split the CPU the machine spent over the
	// measured run, per notification delivered: herald's process (api,
	// relay, worker, and the bench's clients and sink, all in it), the
	// database server's processes on this machine (PostgreSQL; SQLite
	// runs inside herald), the broker's (RabbitMQ, NATS), and the rest.
	// CPUBusy is the machine's busy share over the run (1: every core).
	// null where /proc is missing.
	CPUHeraldMsPerNotification   *float64 `json:"cpu_herald_ms_per_notification"`
	CPUDatabaseMsPerNotification *float64 `json:"cpu_database_ms_per_notification"`
	CPUBrokerMsPerNotification   *float64 `json:"cpu_broker_ms_per_notification"`
	CPUOtherMsPerNotification    *float64 `json:"cpu_other_ms_per_notification"`
	CPUBusy                      *float64 `json:"cpu_busy"`

	// Notes explains zeros and anything else a reader of the numbers needs
	// (a metric that does not apply to the transport, rejected creates).
	Notes []string `json:"notes,omitempty"`
}

// Ceilings are the raw rates measured beside the pipeline; 0 means not
// measured (say why in the Report's notes).
type Ceilings struct {
	TxPerSec       float64
	PublishPerSec  float64
	PipelinePerSec float64
	// POSTPerSec is the receiver's raw POST ceiling, measured with
	// POSTClients requests under way at once.
	POSTPerSec  float64
	POSTClients int
}

// Activity is what the database did over a span (PostgreSQL's statistics;
// see raw.WatchActivity).
type Activity struct {
	// Rows is the rows written (inserted, updated or deleted) to herald's
	// tables; RowsByTable the same by table.
	Rows        int64
	RowsByTable map[string]int64
	// Commits is the transactions committed in herald's database.
	Commits int64
	// WALBytes is the WAL the server wrote: every database's.
	WALBytes int64
	// OtherRows is the rows the server's other databases wrote meanwhile
	// (pg_stat_database), whose WAL WALBytes includes.
	OtherRows int64
	// Updates is the rows of Rows that were updates; HOTUpdates those of
	// them that wrote no index entry (heap-only tuples).
	Updates, HOTUpdates int64
}

// SetCPU adds the CPU split of the measured run, per notification
// delivered.
func (r *Report) SetCPU(s CPUSplit) {
	if r.Delivered == 0 {
		return
	}
	per := func(d time.Duration) *float64 {
		v := round(float64(d.Microseconds())/1000/float64(r.Delivered), 3)
		return &v
	}
	r.CPUHeraldMsPerNotification = per(s.Herald)
	r.CPUDatabaseMsPerNotification = per(s.Database)
	r.CPUBrokerMsPerNotification = per(s.Broker)
	r.CPUOtherMsPerNotification = per(s.Other)
	busy := round(s.Busy, 3)
	r.CPUBusy = &busy
}

// CPUSplit is the CPU time of a span by who spent it (see raw.CPUClock).
type CPUSplit struct {
	Herald, Database, Broker, Other time.Duration
	// Busy is the machine's busy share of the span: 1 is every core busy.
	Busy float64
}

// SetActivity adds the database's activity over the measured run, per
// notification delivered, with a note that breaks the rows down by table.
func (r *Report) SetActivity(a Activity) {
	if r.Delivered == 0 {
		return
	}
	per := func(n int64, digits int) *float64 {
		v := round(float64(n)/float64(r.Delivered), digits)
		return &v
	}
	r.RowsPerNotification = per(a.Rows, 2)
	if a.Updates > 0 {
		v := round(float64(a.HOTUpdates)/float64(a.Updates), 3)
		r.HOTUpdateShare = &v
	}
	r.CommitsPerNotification = per(a.Commits, 2)
	r.WALBytesPerNotification = per(a.WALBytes, 0)
	tables := slices.Sorted(maps.Keys(a.RowsByTable))
	parts := make([]string, len(tables))
	for i, t := range tables {
		parts[i] = fmt.Sprintf("%s %.2f", t, float64(a.RowsByTable[t])/float64(r.Delivered))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("per notification over the measured run: %d rows written, %d commits, %d WAL bytes for %d notifications; rows by table: %s",
		a.Rows, a.Commits, a.WALBytes, r.Delivered, strings.Join(parts, ", ")))
	if a.OtherRows > a.Rows/100 {
		r.Notes = append(r.Notes, fmt.Sprintf("the server's other databases wrote %d rows during the run (herald: %d): wal_bytes_per_notification, server-wide, includes their WAL", a.OtherRows, a.Rows))
	}
}

// NewReport combines a Run's result with the ceilings. Rates are rounded to
// 0.1/s, latencies to 1µs, ratios to 0.001: more digits would be noise.
func NewReport(store, transport string, cfg Config, res Result, c Ceilings) Report {
	cfg = cfg.withDefaults()
	r := Report{
		Store:       store,
		Transport:   transport,
		Channel:     cfg.Channel,
		N:           cfg.N,
		Concurrency: cfg.Concurrency,
		Rate:        cfg.Rate,
		Accepted:    res.Accepted,
		Delivered:   res.Delivered,

		APIPerSec: round(res.APIPerSec, 1),
		APIP50ms:  ms(res.APIP50),
		APIP99ms:  ms(res.APIP99),
		E2EP50ms:  ms(res.E2EP50),
		E2EP99ms:  ms(res.E2EP99),
		E2EMaxms:  ms(res.E2EMax),

		RelayPerSec:     round(res.RelayPerSec, 1),
		DeliveredPerSec: round(res.DeliveredPerSec, 1),
		DrainS:          round(res.Drain.Seconds(), 3),

		RawTxPerSec:      round(c.TxPerSec, 1),
		RawPublishPerSec: round(c.PublishPerSec, 1),
	}
	for _, n := range res.Rejected {
		r.Rejected += n
	}
	if c.TxPerSec > 0 {
		r.APIVsRawTx = round(res.APIPerSec/c.TxPerSec, 3)
	}
	if c.PipelinePerSec > 0 {
		r.RawPipelinePerSec = round(c.PipelinePerSec, 1)
		r.DeliveredVsRawPipeline = round(res.DeliveredPerSec/c.PipelinePerSec, 3)
	}
	if c.POSTPerSec > 0 {
		r.RawPOSTPerSec, r.RawPOSTClients = round(c.POSTPerSec, 1), c.POSTClients
		r.DeliveredVsRawPOST = round(res.DeliveredPerSec/c.POSTPerSec, 3)
	}
	if c.PublishPerSec > 0 && res.RelayPerSec > 0 {
		r.RelayVsRawPublish = round(res.RelayPerSec/c.PublishPerSec, 3)
	}
	if r.Rejected > 0 {
		codes := make([]int, 0, len(res.Rejected))
		for code := range res.Rejected {
			codes = append(codes, code)
		}
		slices.Sort(codes)
		parts := make([]string, len(codes))
		for i, code := range codes {
			label := fmt.Sprint(code)
			if code == 0 {
				label = "no answer"
			}
			parts[i] = fmt.Sprintf("%s: %d", label, res.Rejected[code])
		}
		r.Notes = append(r.Notes, "rejected creates by status: "+strings.Join(parts, ", "))
	}
	if res.Repeats > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d notifications were sent more than once", res.Repeats))
	}
	if res.Published > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("relay published %d events in %d batches (%.1f per batch)",
			res.Published, res.RelayBatches, float64(res.Published)/float64(max(res.RelayBatches, 1))))
	}
	return r
}

// optional formats a figure that may not have been measured.
func optional(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// WriteJSON writes the report as one JSON object on one line.
func (r Report) WriteJSON(w io.Writer) error { return writeJSONLine(w, "report", r) }

// writeJSONLine writes v, a report, as one JSON object on one line; what
// names it in the error.
func writeJSONLine(w io.Writer, what string, v any) error {
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	return nil
}

// writeText writes text, a report made for people; what names it in the
// error.
func writeText(w io.Writer, what, text string) error {
	if _, err := io.WriteString(w, text); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	return nil
}

// WriteText writes the report as an aligned table for people.
func (r Report) WriteText(w io.Writer) error {
	mode := "closed loop"
	if r.Rate > 0 {
		mode = fmt.Sprintf("open loop at %g/s", r.Rate)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "herald bench: %s + %s, channel %s, %d creates from %d clients (%s)", r.Store, r.Transport, r.Channel, r.N, r.Concurrency, mode)
	if r.Preload > 0 {
		fmt.Fprintf(&b, ", on %d notifications already sent", r.Preload)
	}
	b.WriteString("\n\n")
	row := func(name, value, help string) { fmt.Fprintf(&b, "  %-26s %14s   %s\n", name, value, help) }
	what, where := "emails", "the SMTP sink"
	switch r.Channel {
	case ChannelWebhook:
		what, where = "webhooks", "the webhook receiver"
	case ChannelTelegram:
		what, where = "messages", "the Bot API receiver"
	}
	row("channel", r.Channel, "what every create asked for, delivered to "+where)
	row("accepted", fmt.Sprint(r.Accepted), fmt.Sprintf("creates answered 201 (%d rejected)", r.Rejected))
	row("delivered", fmt.Sprint(r.Delivered), what+" "+where+" accepted")
	row("api_per_s", fmt.Sprintf("%.1f", r.APIPerSec), "accepted creates per second")
	row("api_p50_ms", fmt.Sprintf("%.3f", r.APIP50ms), "create latency, median")
	row("api_p99_ms", fmt.Sprintf("%.3f", r.APIP99ms), "create latency, 99th percentile")
	row("e2e_p50_ms", fmt.Sprintf("%.3f", r.E2EP50ms), "201 to delivered, median")
	row("e2e_p99_ms", fmt.Sprintf("%.3f", r.E2EP99ms), "201 to delivered, 99th percentile")
	row("e2e_max_ms", fmt.Sprintf("%.3f", r.E2EMaxms), "201 to delivered, slowest")
	row("relay_per_s", fmt.Sprintf("%.1f", r.RelayPerSec), "events published and confirmed per second")
	row("delivered_per_s", fmt.Sprintf("%.1f", r.DeliveredPerSec), what+" per second, first create to last delivered")
	row("seq_scans_per_1k", fmt.Sprintf("%.1f", r.SeqScansPer1k), "sequential scans of herald's tables per 1,000 deliveries")
	row("drain_s", fmt.Sprintf("%.3f", r.DrainS), "last 201 to last delivered")
	row("raw_tx_per_s", fmt.Sprintf("%.1f", r.RawTxPerSec), "bare create transactions per second, no HTTP")
	row("raw_publish_per_s", fmt.Sprintf("%.1f", r.RawPublishPerSec), "bare persistent confirmed publishes per second")
	row("api_vs_raw_tx", fmt.Sprintf("%.3f", r.APIVsRawTx), "api_per_s / raw_tx_per_s")
	row("relay_vs_raw_publish", fmt.Sprintf("%.3f", r.RelayVsRawPublish), "relay_per_s / raw_publish_per_s")
	row("raw_pipeline_per_s", fmt.Sprintf("%.1f", r.RawPipelinePerSec), "notifications per second through the store's statements alone")
	row("delivered_vs_raw_pipeline", fmt.Sprintf("%.3f", r.DeliveredVsRawPipeline), "delivered_per_s / raw_pipeline_per_s")
	if r.Channel != ChannelEmail {
		row("receiver_latency_ms", fmt.Sprintf("%.0f", r.ReceiverLatencyMs), "the receiver's answer time to each POST")
		row("raw_post_per_s", fmt.Sprintf("%.1f", r.RawPOSTPerSec), fmt.Sprintf("bare POSTs of the same bodies to the receiver per second, %d at once", r.RawPOSTClients))
		row("delivered_vs_raw_post", fmt.Sprintf("%.3f", r.DeliveredVsRawPOST), "delivered_per_s / raw_post_per_s")
	}
	row("rows_per_notification", optional(r.RowsPerNotification, "%.2f"), "rows written to herald's tables, measured run")
	row("commits_per_notification", optional(r.CommitsPerNotification, "%.2f"), "transactions committed, measured run")
	row("wal_bytes_per_notification", optional(r.WALBytesPerNotification, "%.0f"), "WAL bytes written (server-wide), measured run")
	row("hot_update_share", optional(r.HOTUpdateShare, "%.3f"), "updates that wrote no index entry (HOT), measured run")
	row("cpu_herald_ms", optional(r.CPUHeraldMsPerNotification, "%.3f"), "CPU ms per notification in herald's process, measured run")
	row("cpu_database_ms", optional(r.CPUDatabaseMsPerNotification, "%.3f"), "CPU ms per notification in the database server's processes")
	row("cpu_broker_ms", optional(r.CPUBrokerMsPerNotification, "%.3f"), "CPU ms per notification in the broker's processes")
	row("cpu_other_ms", optional(r.CPUOtherMsPerNotification, "%.3f"), "CPU ms per notification elsewhere on the machine")
	row("cpu_busy", optional(r.CPUBusy, "%.3f"), "the machine's busy share over the run (1: every core)")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n  note: %s", n)
	}
	b.WriteString("\n")
	return writeText(w, "report", b.String())
}
