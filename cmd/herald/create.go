package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	apiclient "github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
)

// cmdNotificationsCreate creates one notification, through the API (with
// --api-url: its checks, quiet hours and backpressure) or straight into
// the database (the request checked as the API checks its fields), and
// prints it.
func cmdNotificationsCreate(ctx context.Context, args []string, e env) error {
	const name = "notifications create"
	var (
		asJSON           bool
		r                notify.CreateRequest
		sendAt, priority string
		// Resolved by the API only: --api-url.
		template, data, category, channels string
	)
	cfg, rest, err := parseConfig(name, "Creates one notification and prints it: herald notifications create --user-id U --channel email --to ada@example.com --subject S --body B [--send-at 2026-06-01T09:00:00Z] [--priority high|normal|bulk], or with --template T --data '{...}' [--category C] [--channels telegram,email] instead of the content (and of --to with --channels). With --api-url it goes through the API; otherwise straight into the database (content given only).", args, e,
		func(fs *flag.FlagSet) {
			fs.StringVar(&r.UserID, "user-id", "", "the user it is for (required)")
			fs.StringVar(&r.Channel, "channel", notify.ChannelEmail, "its channel")
			fs.StringVar(&r.To, "to", "", "its recipient (required)")
			fs.StringVar(&r.Subject, "subject", "", "its subject (email)")
			fs.StringVar(&r.Body, "body", "", "its body (required)")
			fs.StringVar(&sendAt, "send-at", "", "RFC 3339 time: not delivered before it")
			fs.StringVar(&priority, "priority", "", "high, normal (the default) or bulk: due high notifications go before every normal one, normal before bulk")
			fs.StringVar(&template, "template", "", "render the content from this template, with --data (needs --api-url)")
			fs.StringVar(&data, "data", "", "the template's data, a JSON object (needs --api-url)")
			fs.StringVar(&category, "category", "", "its category, which the recipient's preferences may opt out of (needs --api-url)")
			fs.StringVar(&channels, "channels", "", "a fallback list, comma-separated (telegram,email), instead of --channel and --to; needs --template (needs --api-url)")
			fs.BoolVar(&asJSON, "json", false, "print the notification as the API shows it")
		})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", name, rest)}
	}
	if sendAt != "" {
		t, err := time.Parse(time.RFC3339Nano, sendAt)
		if err != nil {
			return usageError{fmt.Errorf("%s: --send-at: must be an RFC 3339 time", name)}
		}
		r.SendAt = &t
	}
	if priority != "" {
		r.Priority = notify.Priority(priority)
		if !r.Priority.Valid() {
			return usageError{fmt.Errorf("%s: --priority: must be one of high, normal, bulk", name)}
		}
	}
	resolved := template != "" || data != "" || category != "" || channels != ""
	if resolved && cfg.APIURL == "" {
		return usageError{fmt.Errorf("%s: --template, --data, --category and --channels are resolved by the API: give --api-url", name)}
	}
	var fallback []string
	if channels != "" {
		fallback = strings.Split(channels, ",")
		r.Channel = fallback[0]
	}
	var n notify.Notification
	if cfg.APIURL != "" {
		ac, err := newAPIClient(cfg)
		if err != nil {
			return err
		}
		c, err := ac.c.Create(ctx, apiclient.CreateRequest{UserID: r.UserID, Channel: r.Channel, To: r.To, Subject: r.Subject,
			Body: r.Body, SendAt: r.SendAt, Priority: apiclient.Priority(r.Priority),
			Template: template, Data: rawData(data), Category: category, Channels: fallback})
		if err != nil {
			return fromAPIError(err)
		}
		if n, err = fromClient(c.Notification); err != nil {
			return err
		}
	} else {
		specs, err := knownChannelSpecs(cfg)
		if err != nil {
			return err
		}
		if err := r.Validate(specs); err != nil {
			if fe, ok := errors.AsType[*notify.FieldError](err); ok {
				return usageError{fmt.Errorf("%s: --%s: %s", name, flagOf(fe.Field), fe.Message)}
			}
			return err
		}
		st, closeStore, err := openMigrated(ctx, cfg)
		if err != nil {
			return err
		}
		defer closeStore()
		c, err := st.Create(ctx, notify.NewNotification{Request: r, Destination: specs.DestinationOf(r)})
		if err != nil {
			return err
		}
		n = c.Notification
	}
	if asJSON {
		return printJSON(e.stdout, api.NewNotificationDetail(n))
	}
	return writeNotification(e.stdout, n)
}

// rawData is --data as the request's data, nil when not given.
func rawData(s string) any {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// flagOf is the flag of a create request's field.
func flagOf(field string) string {
	switch field {
	case "user_id":
		return "user-id"
	case "send_at":
		return "send-at"
	}
	return field
}
