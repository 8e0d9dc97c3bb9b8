package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is the parsed configuration of one command. Every field is set
// from the settings table below: the flag when given, else the environment,
// else the contract's default. Components take these values as they are.
type Config struct {
	DatabaseURL string
	// DatabaseDirectURL is HERALD_DATABASE_DIRECT_URL: PostgreSQL itself,
	// for what needs a session when DatabaseURL goes through a pooler.
	DatabaseDirectURL string
	BrokerURL         string
	HTTPAddr          string
	APIToken          string
	// CORSOrigins is HERALD_CORS_ORIGINS as given: a comma-separated list.
	CORSOrigins string
	// AllowedHosts is HERALD_ALLOWED_HOSTS as given: a comma-separated
	// list of the names the API and the console answer to.
	AllowedHosts string
	// RequiredCategories is HERALD_REQUIRED_CATEGORIES as given: the
	// comma-separated categories no user may opt out of.
	RequiredCategories string
	// LinkSecret is HERALD_LINK_SECRET: the key of the signed preference
	// links ("" turns them off).
	LinkSecret string
	// PublicURL is HERALD_PUBLIC_URL: the base URL preference links are
	// made under.
	PublicURL string
	// APIURL is HERALD_API_URL: the read and redrive commands go through
	// this API instead of the database.
	APIURL      string
	SMTPURL     string
	SMTPCAFile  string
	SMTPRate    int
	SMTPFrom    string
	SMTPTimeout time.Duration
	SMTPOutage  string
	// EmailConcurrency is the email channel's own concurrency limit.
	EmailConcurrency int
	// The webhook and Telegram channels' settings.
	WebhookSecret      string
	WebhookAllow       string
	WebhookTimeout     time.Duration
	WebhookRate        int
	WebhookConcurrency int
	// WebhookDestinationConcurrency is the most webhooks to one endpoint
	// at once: its share of the channel's sends.
	WebhookDestinationConcurrency int
	// DestinationDisableAfter is how long a destination may fail before
	// it is disabled (0: never).
	DestinationDisableAfter time.Duration
	StatusWebhookURL        string
	StatusEvents            string // auto, on or off: see writeStatusEvents
	TelegramBotToken        string
	TelegramTimeout         time.Duration
	TelegramRate            int
	TelegramConcurrency     int
	MaxRetries              int
	RetryDelays             []time.Duration
	QueueType               string
	RelayBatch              int
	RelayInterval           time.Duration
	Prefetch                int
	AlertBacklog            int
	AlertFor                time.Duration
	MonitorInterval         time.Duration
	// ProbeInterval is how often a process checks that its database and
	// broker answer (startup.go).
	ProbeInterval  time.Duration
	TelegramToken  string
	TelegramChatID string
	TelegramAPI    string
	MetricsAddr    string
	Retention      time.Duration
	MaxBacklog     int
	DebugFaults    bool
	DebugCrash     string
	LogFormat      string
	LogLevel       string
	ReconcileAfter time.Duration
	// ScheduleHorizon is how far ahead a create's send_at may lie.
	ScheduleHorizon time.Duration
}

// setting is one configuration variable: its environment name, its flag,
// its default, its meaning, the Config field it sets and the commands that
// take it. Adding a setting is one row here and one Config field.
type setting struct {
	env, flag, def, usage string
	// field points at the Config field: *string, *int, *time.Duration,
	// *[]time.Duration (a comma-separated list, at least one) or *bool; its
	// type is the flag's type.
	field func(*Config) any
	// cmds are the commands that take the setting, space-separated.
	cmds string
	// min is the least value of an integer setting.
	min int
	// secret settings are never shown (help masks them); URLs have their
	// password masked.
	secret bool
	// oneOf, when set, lists the values a string setting accepts.
	oneOf string
	// zero allows a zero duration, where zero means something.
	zero bool
	// check, when set, vets a string setting's value as it is parsed, so
	// that a bad value is a usage error before anything starts.
	check func(string) error
}

// Command groups, as the cmds of a setting name them.
const (
	cmdsStore = "serve api relay worker migrate migrate-status outbox-stats outbox-prune dlq-list dlq-show dlq-redrive destinations-list destinations-enable notifications-list notifications-show notifications-create bench"
	cmdsAPI   = "serve api"
	// cmdsDirect listen for outbox rows or drop old partitions.
	cmdsDirect = "serve api relay worker outbox-prune bench"
	cmdsRelay  = "serve relay bench"
	cmdsWorker = "serve worker bench"
	// cmdsChannels take the settings that enable a channel: the API
	// accepts its requests, the worker sends them.
	cmdsChannels = "serve api worker bench"
	cmdsBroker   = "serve api relay worker dlq-redrive bench"
	cmdsProcess  = "relay worker"
	cmdsLong     = "serve api relay worker"
	// cmdsClient can talk to the API instead of the database.
	cmdsClient = "notifications-list notifications-show notifications-create dlq-list dlq-show dlq-redrive destinations-list destinations-enable"
)

var settings = []setting{
	{env: "HERALD_DATABASE_URL", flag: "database-url", def: "sqlite:herald.db", usage: "store: postgres://..., sqlite:PATH or mongodb://host/DATABASE",
		field: func(c *Config) any { return &c.DatabaseURL }, cmds: cmdsStore},
	{env: "HERALD_DATABASE_DIRECT_URL", flag: "database-direct-url", def: "", usage: "when HERALD_DATABASE_URL goes through a pooler in transaction mode (PgBouncer), postgres://... of the same database without it: LISTEN (wake-ups from other processes' creates) and the drop of old outbox partitions need a session; unset behind a pooler: relays and table workers poll every HERALD_RELAY_INTERVAL and old partitions are kept",
		field: func(c *Config) any { return &c.DatabaseDirectURL }, cmds: cmdsDirect, check: checkDirectURL},
	{env: "HERALD_BROKER_URL", flag: "broker-url", def: "", usage: "transport: amqp://... (RabbitMQ), nats://... (NATS JetStream), kafka://host:port or sqs://REGION/PREFIX[?endpoint=URL&fifo=true] (Amazon SQS, credentials from the AWS SDK chain); several comma-separated URLs or hosts: a cluster; unset: the outbox table, no broker",
		field: func(c *Config) any { return &c.BrokerURL }, cmds: cmdsBroker},
	{env: "HERALD_HTTP_ADDR", flag: "http-addr", def: "127.0.0.1:8080", usage: "API listen address",
		field: func(c *Config) any { return &c.HTTPAddr }, cmds: cmdsAPI, check: checkListenAddr},
	{env: "HERALD_API_TOKEN", flag: "api-token", def: "", usage: "when set, every API call but health needs Authorization: Bearer <token>; the commands given --api-url send it",
		field: func(c *Config) any { return &c.APIToken }, cmds: cmdsAPI + " " + cmdsClient, secret: true},
	{env: "HERALD_API_URL", flag: "api-url", def: "", usage: "read and redrive through this herald API (http://host:8080, with HERALD_API_TOKEN) instead of the database; unset: the database",
		field: func(c *Config) any { return &c.APIURL }, cmds: cmdsClient},
	{env: "HERALD_CORS_ORIGINS", flag: "cors-origins", def: "", usage: "browser origins allowed to call the API, comma-separated: exact origins (https://app.example.com) or * for any; preflights from them are answered; unset: no CORS",
		field: func(c *Config) any { return &c.CORSOrigins }, cmds: cmdsAPI, check: checkCORSOrigins},
	{env: "HERALD_ALLOWED_HOSTS", flag: "allowed-hosts", def: "", usage: "host names the API and the console answer to besides IP addresses, localhost and the name in HERALD_HTTP_ADDR, which they always answer (the names a proxy or a DNS name serves herald under), comma-separated: exact names (herald.example.com), .example.com for that name and every name under it, or * for any Host (the check off); a request naming another Host is refused with 421 (a defence against DNS rebinding), but for /healthz, /readyz, /metrics, /openapi.json and /unsubscribe/TOKEN; ports are not compared",
		field: func(c *Config) any { return &c.AllowedHosts }, cmds: cmdsAPI, check: checkAllowedHosts},
	{env: "HERALD_REQUIRED_CATEGORIES", flag: "required-categories", def: "", usage: "categories no user may opt out of (transactional ones: password resets, receipts), comma-separated: a preferences PUT opting out of one is refused (422 naming it), no preference link is made for one, and a create in one is never suppressed; unset: every category may be opted out of",
		field: func(c *Config) any { return &c.RequiredCategories }, cmds: cmdsAPI, check: checkCategories},
	{env: "HERALD_LINK_SECRET", flag: "link-secret", def: "", usage: "the key (at least 32 characters; random, kept secret, the same on every API process) that signs preference links, /unsubscribe/TOKEN (HMAC-SHA256 over the user, category, channel and expiry): following one opts the user out of that category on that channel without a login; changing it voids every link given out; unset: links are off (their routes answer 404 links_off)",
		field: func(c *Config) any { return &c.LinkSecret }, cmds: cmdsAPI, secret: true, check: checkLinkSecret},
	{env: "HERALD_PUBLIC_URL", flag: "public-url", def: "", usage: "the https:// (or http://) base URL people reach herald under from the outside (https://herald.example.com): preference links are made under it, and an email with a category (not a required one) carries List-Unsubscribe: <HERALD_PUBLIC_URL/unsubscribe/TOKEN> and List-Unsubscribe-Post: List-Unsubscribe=One-Click (RFC 8058; mailbox providers take only https://), rendered at create and stored with it; unset: links are paths (/unsubscribe/TOKEN) for the caller to put under its own base, and emails carry no List-Unsubscribe",
		field: func(c *Config) any { return &c.PublicURL }, cmds: cmdsAPI, check: checkPublicURL},
	{env: "HERALD_SMTP_URL", flag: "smtp-url", def: "", usage: "smtp://[user:pass@]host:port[?tls=required|opportunistic|none] (STARTTLS; required with credentials), smtps:// for implicit TLS, or mbox:PATH to write mail to a file on purpose; unset: serve writes mail to herald.mbox, a worker refuses to start",
		field: func(c *Config) any { return &c.SMTPURL }, cmds: "serve worker", check: checkSMTPURL},
	{env: "HERALD_SMTP_CA_FILE", flag: "smtp-ca-file", def: "", usage: "PEM certificates trusted besides the system's for the SMTP server's TLS (a private CA)",
		field: func(c *Config) any { return &c.SMTPCAFile }, cmds: "serve worker"},
	{env: "HERALD_SMTP_RATE", flag: "smtp-rate", def: "0", usage: "most emails per second this process hands the SMTP server: the email channel's HERALD_<CHANNEL>_RATE (0: no limit); a delivery whose turn has not come is parked until it, before it is claimed, so the limit never costs an attempt and holds up no other channel",
		field: func(c *Config) any { return &c.SMTPRate }, cmds: cmdsWorker, min: 0},
	{env: "HERALD_SMTP_FROM", flag: "smtp-from", def: "herald@localhost", usage: "From address (its domain names the Message-ID)",
		field: func(c *Config) any { return &c.SMTPFrom }, cmds: cmdsWorker, check: checkAddress},
	{env: "HERALD_SMTP_TIMEOUT", flag: "smtp-timeout", def: "30s", usage: "the email channel's send timeout: bounds one send (dial, commands, data); a delivery's claim, one for every channel, lasts 25s longer than the longest channel's timeout (its claim and record transactions, 10s each, and a margin), so a slow send is never repeated while it runs",
		field: func(c *Config) any { return &c.SMTPTimeout }, cmds: cmdsWorker},
	{env: "HERALD_SMTP_OUTAGE", flag: "smtp-outage", def: "wait", usage: "what an SMTP server that cannot be reached (or refuses TLS, AUTH, the greeting) costs: wait (no attempt spent; sends pause and resume when it is back) or attempt (each delivery spends an attempt, then dead-letters: the chapter's exercise 4)",
		field: func(c *Config) any { return &c.SMTPOutage }, cmds: cmdsWorker, oneOf: "wait attempt"},
	{env: "HERALD_EMAIL_CONCURRENCY", flag: "email-concurrency", def: "0", usage: "most emails this process sends at once (the email channel's HERALD_<CHANNEL>_CONCURRENCY; HERALD_SMTP_RATE is its rate, HERALD_SMTP_TIMEOUT its timeout); a delivery waits briefly for a slot before it is claimed, then is parked (0: no limit but HERALD_PREFETCH)",
		field: func(c *Config) any { return &c.EmailConcurrency }, cmds: cmdsWorker, min: 0},
	{env: "HERALD_WEBHOOK_SECRET", flag: "webhook-secret", def: "", usage: "the webhook channel's signing secrets (Standard Webhooks whsec_<base64>, comma-separated: requests are signed with the first); set, it enables the channel webhook",
		field: func(c *Config) any { return &c.WebhookSecret }, cmds: cmdsChannels + " relay", secret: true, check: checkWebhookSecret},
	{env: "HERALD_WEBHOOK_ALLOW", flag: "webhook-allow", def: "", usage: "CIDR ranges (comma-separated) a webhook may reach although the SSRF guard refuses them: loopback, private, link-local, CGNAT, multicast, unspecified",
		field: func(c *Config) any { return &c.WebhookAllow }, cmds: cmdsChannels, check: checkWebhookAllow},
	{env: "HERALD_WEBHOOK_TIMEOUT", flag: "webhook-timeout", def: "10s", usage: "bound on one webhook request: connect, TLS, request, reply",
		field: func(c *Config) any { return &c.WebhookTimeout }, cmds: cmdsWorker + " relay"},
	{env: "HERALD_WEBHOOK_RATE", flag: "webhook-rate", def: "0", usage: "most webhooks per second this process sends (0: no limit)",
		field: func(c *Config) any { return &c.WebhookRate }, cmds: cmdsWorker, min: 0},
	{env: "HERALD_WEBHOOK_CONCURRENCY", flag: "webhook-concurrency", def: "0", usage: "most webhooks this process sends at once (0: no limit but HERALD_PREFETCH)",
		field: func(c *Config) any { return &c.WebhookConcurrency }, cmds: cmdsWorker, min: 0},
	{env: "HERALD_WEBHOOK_DESTINATION_CONCURRENCY", flag: "webhook-destination-concurrency", def: "8", usage: "most webhooks this process sends at once to one endpoint (scheme, host and port): its share of the channel's sends, so that an endpoint with a long backlog, or a slow one, never takes the sends the others need; deliveries beyond it are parked and come back, with no attempt spent (0: no share of its own)",
		field: func(c *Config) any { return &c.WebhookDestinationConcurrency }, cmds: cmdsWorker, min: 0},
	{env: "HERALD_DESTINATION_DISABLE_AFTER", flag: "destination-disable-after", def: "72h", usage: "how long a destination (a webhook endpoint, or a channel's provider: the mail server, the Bot API) may fail, from its first failure as the database records it, before it is disabled: its pending notifications are then dead-lettered with that reason until an operator enables it again (herald destinations enable KEY, or POST /destinations/{key}/enable) and redrives them (0: never)",
		field: func(c *Config) any { return &c.DestinationDisableAfter }, cmds: cmdsWorker},
	{env: "HERALD_STATUS_WEBHOOK_URL", flag: "status-webhook-url", def: "", usage: "the operator's endpoint that receives every status event (notification.sent, notification.failed) as a signed POST (HERALD_WEBHOOK_SECRET, required with it; not guarded: the URL is trusted), at least once, webhook-id evt_<outbox id>; a second relay loop sends them, so a failing endpoint delays only status events (with a broker: the relay process; on the outbox table: each worker process)",
		field: func(c *Config) any { return &c.StatusWebhookURL }, cmds: "serve relay worker"},
	{env: "HERALD_STATUS_EVENTS", flag: "status-events", def: "auto", usage: "whether the delivery that settles a notification writes its status event (notification.sent, notification.failed) to the outbox: auto when the events have a destination (a broker, or HERALD_STATUS_WEBHOOK_URL), so not on the outbox table without a status webhook, where nobody receives them; on always (on the outbox table without a status webhook they are marked processed at once, for whoever reads the outbox); off never (HERALD_STATUS_WEBHOOK_URL with off is a start-up error)",
		field: func(c *Config) any { return &c.StatusEvents }, cmds: "serve relay worker bench", oneOf: "auto on off"},
	{env: "HERALD_TELEGRAM_BOT_TOKEN", flag: "telegram-bot-token", def: "", usage: "the telegram channel's bot token (at HERALD_TELEGRAM_API); set, it enables the channel telegram (alerts keep HERALD_TELEGRAM_TOKEN)",
		field: func(c *Config) any { return &c.TelegramBotToken }, cmds: cmdsChannels, secret: true},
	{env: "HERALD_TELEGRAM_TIMEOUT", flag: "telegram-timeout", def: "10s", usage: "bound on one Bot API request of the telegram channel",
		field: func(c *Config) any { return &c.TelegramTimeout }, cmds: cmdsWorker},
	{env: "HERALD_TELEGRAM_RATE", flag: "telegram-rate", def: "0", usage: "most Telegram messages per second this process sends (0: no limit; the Bot API allows about 30)",
		field: func(c *Config) any { return &c.TelegramRate }, cmds: cmdsWorker, min: 0},
	{env: "HERALD_TELEGRAM_CONCURRENCY", flag: "telegram-concurrency", def: "0", usage: "most Telegram messages this process sends at once (0: no limit but HERALD_PREFETCH)",
		field: func(c *Config) any { return &c.TelegramConcurrency }, cmds: cmdsWorker, min: 0},
	{env: "HERALD_MAX_RETRIES", flag: "max-retries", def: "5", usage: "retries after the first attempt; then dead-letter (0: dead-letter on the first failure)",
		field: func(c *Config) any { return &c.MaxRetries }, cmds: cmdsWorker, min: 0},
	{env: "HERALD_RETRY_DELAY", flag: "retry-delay", def: "30s", usage: "delay before each retry; a list (30s,5m,30m,2h) sets the delay of each retry in turn, the last one repeating",
		field: func(c *Config) any { return &c.RetryDelays }, cmds: cmdsWorker + " relay dlq-redrive"},
	{env: "HERALD_QUEUE_TYPE", flag: "queue-type", def: "quorum", usage: "RabbitMQ queue type: quorum (replicated, at-least-once dead-lettering; RabbitMQ 3.10+) or classic",
		field: func(c *Config) any { return &c.QueueType }, cmds: cmdsWorker + " relay dlq-redrive", oneOf: "quorum classic"},
	{env: "HERALD_RELAY_BATCH", flag: "relay-batch", def: "100", usage: "outbox rows claimed per relay transaction",
		field: func(c *Config) any { return &c.RelayBatch }, cmds: cmdsRelay, min: 1},
	{env: "HERALD_RELAY_INTERVAL", flag: "relay-interval", def: "500ms", usage: "longest idle wait between outbox polls",
		field: func(c *Config) any { return &c.RelayInterval }, cmds: cmdsRelay + " worker"},
	{env: "HERALD_PREFETCH", flag: "prefetch", def: "32", usage: "sends in flight per worker, and the SMTP sessions it keeps open; the worker holds 4x as many deliveries from its transport, so that recording and acknowledging outcomes never holds up a send; no database connection is held across a send",
		field: func(c *Config) any { return &c.Prefetch }, cmds: cmdsWorker, min: 1},
	{env: "HERALD_ALERT_BACKLOG", flag: "alert-backlog", def: "100", usage: "alert threshold on unprocessed outbox rows (0: alert on any backlog)",
		field: func(c *Config) any { return &c.AlertBacklog }, cmds: cmdsAPI, min: 0},
	{env: "HERALD_ALERT_FOR", flag: "alert-for", def: "5m", usage: "how long the backlog must stay above the threshold (0: alert at the first sample above it)",
		field: func(c *Config) any { return &c.AlertFor }, cmds: cmdsAPI, zero: true},
	{env: "HERALD_MONITOR_INTERVAL", flag: "monitor-interval", def: "15s", usage: "backlog sampling period",
		field: func(c *Config) any { return &c.MonitorInterval }, cmds: cmdsAPI},
	{env: "HERALD_PROBE_INTERVAL", flag: "probe-interval", def: "10s", usage: "how often a process checks that its database and broker answer; each change (unreachable, reachable again) is logged, and a relay or worker that could not declare its broker names at start declares them as soon as the broker answers",
		field: func(c *Config) any { return &c.ProbeInterval }, cmds: cmdsLong},
	{env: "HERALD_TELEGRAM_TOKEN", flag: "telegram-token", def: "", usage: "also send alerts to Telegram with this bot token",
		field: func(c *Config) any { return &c.TelegramToken }, cmds: cmdsAPI, secret: true},
	{env: "HERALD_TELEGRAM_CHAT_ID", flag: "telegram-chat-id", def: "", usage: "Telegram chat for alerts",
		field: func(c *Config) any { return &c.TelegramChatID }, cmds: cmdsAPI},
	{env: "HERALD_TELEGRAM_API", flag: "telegram-api", def: "https://api.telegram.org", usage: "Telegram Bot API base URL (the alert's and the telegram channel's)",
		field: func(c *Config) any { return &c.TelegramAPI }, cmds: cmdsAPI + " worker bench", check: checkHTTPURL},
	{env: "HERALD_METRICS_ADDR", flag: "metrics-addr", def: "", usage: "own /metrics listener for relay and worker",
		field: func(c *Config) any { return &c.MetricsAddr }, cmds: cmdsProcess, check: checkMetricsAddr},
	{env: "HERALD_RETENTION", flag: "retention", def: "168h", usage: "age after which processed outbox and dedup rows are pruned",
		field: func(c *Config) any { return &c.Retention }, cmds: cmdsAPI + " outbox-prune"},
	{env: "HERALD_MAX_BACKLOG", flag: "max-backlog", def: "0", usage: "above this many due unprocessed rows (rows scheduled for later do not count), creates answer 429 (0: off)",
		field: func(c *Config) any { return &c.MaxBacklog }, cmds: cmdsAPI, min: 0},
	{env: "HERALD_DEBUG_FAULTS", flag: "debug-faults", def: "false", usage: "enables fault injection: the X-Herald-Fault header and HERALD_DEBUG_CRASH",
		field: func(c *Config) any { return &c.DebugFaults }, cmds: cmdsAPI + " worker"},
	{env: "HERALD_DEBUG_CRASH", flag: "debug-crash", def: "", usage: "with HERALD_DEBUG_FAULTS=1: POINT[:N] kills the worker (SIGKILL) at its N-th pass of after-send or after-commit",
		field: func(c *Config) any { return &c.DebugCrash }, cmds: "serve worker"},
	{env: "HERALD_RECONCILE_AFTER", flag: "reconcile-after", def: "1h", usage: "a pending notification with no event in flight for this long gets a fresh event (the database is the record)",
		field: func(c *Config) any { return &c.ReconcileAfter }, cmds: cmdsAPI},
	{env: "HERALD_SCHEDULE_HORIZON", flag: "schedule-horizon", def: "8760h", usage: "how far ahead a create's send_at may lie (default a year); further is refused with 400 (field send_at)",
		field: func(c *Config) any { return &c.ScheduleHorizon }, cmds: cmdsAPI},
	{env: "HERALD_LOG_FORMAT", flag: "log-format", def: "text", usage: "log format: text or json (one object per line, for log shippers)",
		field: func(c *Config) any { return &c.LogFormat }, cmds: cmdsLong, oneOf: "text json"},
	{env: "HERALD_LOG_LEVEL", flag: "log-level", def: "info", usage: "lowest level logged: debug, info, warn or error",
		field: func(c *Config) any { return &c.LogLevel }, cmds: cmdsLong, oneOf: "debug info warn error"},
}

// takes reports whether the command (herald's words joined with "-", as in
// "dlq-redrive") takes s.
func (s setting) takes(cmd string) bool {
	return contains(strings.Fields(s.cmds), strings.ReplaceAll(cmd, " ", "-"))
}

// typeName is the flag's type as help shows it.
func (s setting) typeName() string {
	switch s.field(&Config{}).(type) {
	case *int:
		return "int"
	case *time.Duration:
		return "duration"
	case *[]time.Duration:
		return "durations"
	case *bool:
		return "bool"
	}
	return "string"
}

// shown is v as help and logs may show it: secrets masked, URL passwords
// redacted.
func (s setting) shown(v string) string {
	if s.secret && v != "" {
		return "****"
	}
	return redact(v)
}

// set parses v into the setting's Config field.
func (s setting) set(c *Config, v string) error {
	switch p := s.field(c).(type) {
	case *string:
		if s.oneOf != "" && !contains(strings.Fields(s.oneOf), v) {
			return fmt.Errorf("want one of %s, got %q", strings.ReplaceAll(s.oneOf, " ", ", "), v)
		}
		if s.check != nil {
			if err := s.check(v); err != nil {
				return err
			}
		}
		*p = v
	case *int:
		n, err := strconv.Atoi(v)
		if err != nil || n < s.min {
			return fmt.Errorf("want an integer >= %d, got %q", s.min, v)
		}
		*p = n
	case *time.Duration:
		d, err := s.duration(v)
		if err != nil {
			return err
		}
		*p = d
	case *[]time.Duration:
		var list []time.Duration
		for item := range strings.SplitSeq(v, ",") {
			d, err := s.duration(strings.TrimSpace(item))
			if err != nil {
				return fmt.Errorf("want a comma-separated list of positive durations like 30s,5m,30m: %w", err)
			}
			list = append(list, d)
		}
		*p = list
	case *bool:
		switch v {
		case "1", "true":
			*p = true
		case "", "0", "false":
			*p = false
		default:
			return fmt.Errorf("want 1 or 0, got %q", v)
		}
	}
	return nil
}

// duration parses one duration of the setting: positive, or zero where the
// setting allows it.
func (s setting) duration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d == 0 && !s.zero {
		return 0, fmt.Errorf("want a positive duration like 30s, got %q", v)
	}
	return d, nil
}

// errHelp is returned when the user asked for --help; the usage is printed
// on stdout.
var errHelp = flag.ErrHelp

// usageError is a command line that cannot be parsed: main prints it and
// exits 2.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == errUsage }

// flagValue is a setting's flag: it records the text; parsing into Config
// happens once, after the environment is merged.
type flagValue struct {
	v, typ string
	isBool bool
}

func (f *flagValue) String() string     { return f.v }
func (f *flagValue) Set(v string) error { f.v = v; return nil }
func (f *flagValue) IsBoolFlag() bool   { return f.isBool }

// parseConfig parses a command's flags over the environment into a Config.
// name is the command ("outbox stats"); extra, when not nil, adds the
// command's own flags. Flags may stand anywhere on the line; the positional
// arguments are returned. --help prints the usage on stdout and returns
// errHelp.
func parseConfig(name, summary string, args []string, e env, extra func(*flag.FlagSet)) (Config, []string, error) {
	fs := flag.NewFlagSet("herald "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if extra != nil {
		extra(fs)
	}
	values := map[string]*flagValue{}
	var uses []setting
	for _, s := range settings {
		if !s.takes(name) {
			continue
		}
		uses = append(uses, s)
		typ := s.typeName()
		values[s.flag] = &flagValue{typ: typ, isBool: typ == "bool"}
		fs.Var(values[s.flag], s.flag, s.usage)
	}
	// The settings' flags given before the command come first: the
	// command's own line wins.
	rest, err := parseInterspersed(fs, append(slices.Clone(e.globals), args...))
	if errors.Is(err, flag.ErrHelp) {
		printUsage(e.stdout, name, summary, fs, uses, e.getenv)
		return Config{}, nil, errHelp
	}
	if err != nil {
		return Config{}, nil, usageError{flagError(name, fs, err)}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var c Config
	var errs []error
	for _, s := range settings {
		v, from := s.def, "default"
		if ev, ok := lookup(e.getenv, s.env); ok {
			v, from = ev, s.env
		}
		// A flag of the command's own that shares its name with a setting
		// the command does not take (recipients put's --telegram-chat-id,
		// HERALD_TELEGRAM_CHAT_ID's flag) is not that setting.
		if fv, ok := values[s.flag]; ok && given[s.flag] {
			v, from = strings.TrimSpace(fv.v), "--"+s.flag
		}
		if err := s.set(&c, v); err != nil {
			if s.takes(name) {
				errs = append(errs, fmt.Errorf("%s (%s, from %s): %w", "--"+s.flag, s.env, from, err))
			}
		}
	}
	if !c.DebugFaults {
		c.DebugCrash = ""
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, nil, usageError{fmt.Errorf("%s: %w", name, err)}
	}
	return c, rest, nil
}

// parseInterspersed parses flags that stand anywhere among the positional
// arguments, which it returns in order; "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if consumed := len(args) - len(left); consumed > 0 && args[consumed-1] == "--" {
			return append(rest, left...), nil
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}

// printUsage prints a command's help: its summary, its own flags, then its
// settings with the value in effect (environment included, secrets masked).
func printUsage(w io.Writer, name, summary string, fs *flag.FlagSet, uses []setting, getenv func(string) string) {
	fmt.Fprintf(w, "Usage: herald %s [flags]\n\n%s\n", name, summary)
	isSetting := map[string]bool{}
	for _, s := range uses {
		isSetting[s.flag] = true
	}
	var own []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !isSetting[f.Name] {
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		for _, f := range own {
			typ, usage := flag.UnquoteUsage(f)
			def := ""
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				def = " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(w, "  --%s %s\n        %s%s\n", f.Name, typ, usage, def)
		}
	}
	if len(uses) == 0 {
		return
	}
	sort.SliceStable(uses, func(i, j int) bool { return uses[i].flag < uses[j].flag })
	fmt.Fprintln(w, "\nSettings (flag > environment > default):")
	for _, s := range uses {
		effective := "default " + s.shown(s.def)
		if s.def == "" {
			effective = "unset"
		}
		if v, ok := lookup(getenv, s.env); ok {
			effective = s.env + "=" + s.shown(v)
		}
		fmt.Fprintf(w, "  --%s %s\n        %s\n        (%s; %s)\n", s.flag, s.typeName(), s.usage, s.env, effective)
	}
}

func lookup(getenv func(string) string, name string) (string, bool) {
	v := strings.TrimSpace(getenv(name))
	return v, v != ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// parseFlags is parseConfig for a command that takes no positional
// arguments.
func parseFlags(name, summary string, args []string, e env, extra func(*flag.FlagSet)) (Config, error) {
	c, rest, err := parseConfig(name, summary, args, e, extra)
	if err == nil && len(rest) > 0 {
		err = usageError{fmt.Errorf("%s takes no arguments, got %q (run 'herald %s --help')", name, rest, name)}
	}
	return c, err
}

// checkDirectURL vets HERALD_DATABASE_DIRECT_URL: unset, or a PostgreSQL
// URL.
func checkDirectURL(v string) error {
	if v == "" || strings.HasPrefix(v, "postgres://") || strings.HasPrefix(v, "postgresql://") {
		return nil
	}
	return fmt.Errorf("want postgres://... (PostgreSQL without the pooler), got %q", redact(v))
}
