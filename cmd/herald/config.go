package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// setting is one configuration variable: its environment name, its flag, its
// default and its meaning. The table below is the contract's configuration
// table; every command takes the flags of the settings it uses.
type setting struct {
	env, flag, def, usage string
}

var settings = []setting{
	{"HERALD_DATABASE_URL", "database-url", "sqlite:herald.db", "store: postgres://... or sqlite:PATH"},
	{"HERALD_BROKER_URL", "broker-url", "", "transport: amqp://... (unset: the outbox table, no broker)"},
	{"HERALD_HTTP_ADDR", "http-addr", "127.0.0.1:8080", "API listen address"},
	{"HERALD_API_TOKEN", "api-token", "", "when set, every API call but health needs Authorization: Bearer <token>"},
	{"HERALD_SMTP_URL", "smtp-url", "", "smtp://[user:pass@]host:port (smtps:// for TLS); unset: mail goes to herald.mbox"},
	{"HERALD_SMTP_FROM", "smtp-from", "herald@localhost", "From address (its domain names the Message-ID)"},
	{"HERALD_MAX_RETRIES", "max-retries", "5", "retries after the first attempt; then dead-letter"},
	{"HERALD_RETRY_DELAY", "retry-delay", "30s", "delay before each retry"},
	{"HERALD_RELAY_BATCH", "relay-batch", "100", "outbox rows claimed per relay transaction"},
	{"HERALD_RELAY_INTERVAL", "relay-interval", "500ms", "longest idle wait between outbox polls"},
	{"HERALD_PREFETCH", "prefetch", "10", "unacknowledged deliveries per worker"},
	{"HERALD_ALERT_BACKLOG", "alert-backlog", "100", "alert threshold on unprocessed outbox rows"},
	{"HERALD_ALERT_FOR", "alert-for", "5m", "how long the backlog must stay above the threshold"},
	{"HERALD_MONITOR_INTERVAL", "monitor-interval", "15s", "backlog sampling period"},
	{"HERALD_TELEGRAM_TOKEN", "telegram-token", "", "also send alerts to Telegram with this bot token"},
	{"HERALD_TELEGRAM_CHAT_ID", "telegram-chat-id", "", "Telegram chat for alerts"},
	{"HERALD_TELEGRAM_API", "telegram-api", "https://api.telegram.org", "Telegram Bot API base URL"},
	{"HERALD_METRICS_ADDR", "metrics-addr", "", "own /metrics listener for relay and worker"},
	{"HERALD_RETENTION", "retention", "168h", "age after which processed outbox and dedup rows are pruned"},
	{"HERALD_MAX_BACKLOG", "max-backlog", "0", "above this many unprocessed rows, creates answer 429 (0: off)"},
	{"HERALD_DEBUG_FAULTS", "debug-faults", "", "1 enables fault injection: the X-Herald-Fault header and HERALD_DEBUG_CRASH"},
	{"HERALD_DEBUG_CRASH", "debug-crash", "", "with HERALD_DEBUG_FAULTS=1: POINT[:N] kills the worker (SIGKILL) at its N-th pass of after-send or after-commit"},
}

// Config is the parsed configuration of one command.
type Config struct {
	DatabaseURL     string
	BrokerURL       string
	HTTPAddr        string
	APIToken        string
	SMTPURL         string
	SMTPFrom        string
	MaxRetries      int
	RetryDelay      time.Duration
	RelayBatch      int
	RelayInterval   time.Duration
	Prefetch        int
	AlertBacklog    int
	AlertFor        time.Duration
	MonitorInterval time.Duration
	TelegramToken   string
	TelegramChatID  string
	TelegramAPI     string
	MetricsAddr     string
	Retention       time.Duration
	MaxBacklog      int
	DebugFaults     bool
	DebugCrash      string
}

// errHelp is returned when the user asked for --help; the usage is printed.
var errHelp = flag.ErrHelp

// parseConfig parses the flags of a command over the environment. uses lists
// the settings the command takes; extra, when not nil, adds the command's own
// flags.
func parseConfig(name, summary string, args []string, getenv func(string) string, stderr io.Writer, extra func(*flag.FlagSet), uses ...string) (Config, []string, error) {
	fs := flag.NewFlagSet("herald "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if extra != nil {
		extra(fs)
	}
	values := map[string]*string{}
	for _, s := range settings {
		if !contains(uses, s.flag) {
			continue
		}
		// The flag's default is the contract's, not the environment's:
		// --help must never print a token or a password taken from the
		// environment.
		values[s.flag] = fs.String(s.flag, s.def, s.usage+" ("+s.env+")")
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: herald %s [flags]\n\n%s\n\nFlags (each overrides its environment variable):\n", name, summary)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// get resolves a setting: the flag when given, else the environment,
	// else the default.
	get := func(flag string) string {
		if p := values[flag]; p != nil && set[flag] {
			return strings.TrimSpace(*p)
		}
		for _, s := range settings {
			if s.flag == flag {
				if v, ok := lookup(getenv, s.env); ok {
					return v
				}
				return s.def
			}
		}
		return ""
	}
	var errs []error
	integer := func(flag string, min int) int {
		v, err := strconv.Atoi(get(flag))
		if (err != nil || v < min) && values[flag] != nil {
			errs = append(errs, fmt.Errorf("--%s (%s): want an integer >= %d, got %q", flag, envOf(flag), min, get(flag)))
		}
		return v
	}
	duration := func(flag string) time.Duration {
		v, err := time.ParseDuration(get(flag))
		if (err != nil || v <= 0) && values[flag] != nil {
			errs = append(errs, fmt.Errorf("--%s (%s): want a positive duration like 30s, got %q", flag, envOf(flag), get(flag)))
		}
		return v
	}
	c := Config{
		DatabaseURL:     get("database-url"),
		BrokerURL:       get("broker-url"),
		HTTPAddr:        get("http-addr"),
		APIToken:        get("api-token"),
		SMTPURL:         get("smtp-url"),
		SMTPFrom:        get("smtp-from"),
		MaxRetries:      integer("max-retries", 0),
		RetryDelay:      duration("retry-delay"),
		RelayBatch:      integer("relay-batch", 1),
		RelayInterval:   duration("relay-interval"),
		Prefetch:        integer("prefetch", 1),
		AlertBacklog:    integer("alert-backlog", 0),
		AlertFor:        duration("alert-for"),
		MonitorInterval: duration("monitor-interval"),
		TelegramToken:   get("telegram-token"),
		TelegramChatID:  get("telegram-chat-id"),
		TelegramAPI:     get("telegram-api"),
		MetricsAddr:     get("metrics-addr"),
		Retention:       duration("retention"),
		MaxBacklog:      integer("max-backlog", 0),
		DebugCrash:      get("debug-crash"),
	}
	switch v := get("debug-faults"); v {
	case "", "0", "false":
		c.DebugCrash = ""
	case "1", "true":
		c.DebugFaults = true
	default:
		errs = append(errs, fmt.Errorf("--debug-faults (HERALD_DEBUG_FAULTS): want 1 or 0, got %q", v))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	return c, fs.Args(), nil
}

func lookup(getenv func(string) string, name string) (string, bool) {
	v := strings.TrimSpace(getenv(name))
	return v, v != ""
}

func envOf(flag string) string {
	for _, s := range settings {
		if s.flag == flag {
			return s.env
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// redact drops the password from a URL for logs and errors.
func redact(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return url
	}
	if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return url
}
