package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apiclient "github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
)

func cmdNotifications(ctx context.Context, args []string, e env) error {
	return subcommands(ctx, args, e, "Usage: herald notifications list [--user-id ID] [--status S] [--channel C] [--created-after T] [--created-before T] [--limit N] [--cursor C] [--json]\n       herald notifications show ID [--attempts-limit N] [--attempts-cursor C] [--json]\n       herald notifications cancel ID [--json]\n       herald notifications create --user-id U --channel C --to T [--subject S] --body B [--send-at T] [--priority P] [--json]\n\nRun 'herald notifications SUBCOMMAND --help' for its flags.",
		map[string]func(context.Context, []string, env) error{"list": cmdNotificationsList, "show": cmdNotificationsShow, "cancel": cmdNotificationsCancel, "create": cmdNotificationsCreate})
}

// listQuery is the query a list command's flags stand for, for the API's
// own parser: the page size, and each filter or cursor given (an empty
// one is left out, as a client leaves it out).
func listQuery(limit int, params map[string]string) url.Values {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	for name, v := range params {
		if v != "" {
			q.Set(name, v)
		}
	}
	return q
}

func cmdNotificationsList(ctx context.Context, args []string, e env) error {
	var (
		userID, status, channel, after, before, cursor string
		limit                                          int
		asJSON                                         bool
	)
	cfg, err := parseFlags("notifications list", "Lists notifications newest first, a page at a time, as GET /notifications does. The next page's cursor is printed on stderr (in the JSON with --json); pass it with the same filters.",
		args, e, func(fs *flag.FlagSet) {
			fs.StringVar(&userID, "user-id", "", "only this user's notifications")
			fs.StringVar(&status, "status", "", "only notifications in this status: pending, scheduled, sent, failed, canceled, expired or suppressed")
			fs.StringVar(&channel, "channel", "", "only notifications of this channel: "+strings.Join(channelNames(), ", "))
			fs.StringVar(&after, "created-after", "", "only those created at or after this RFC 3339 time")
			fs.StringVar(&before, "created-before", "", "only those created before this RFC 3339 time")
			fs.IntVar(&limit, "limit", api.DefaultListLimit, "page size, from 1 to "+strconv.Itoa(api.MaxListLimit))
			fs.StringVar(&cursor, "cursor", "", "resume where the previous page ended (its next cursor, same filters)")
			fs.BoolVar(&asJSON, "json", false, `print the page as the API answers it: {"items": [...], "next_cursor": "..."}`)
		})
	if err != nil {
		return err
	}
	// The flags go through the API's own parser: the same rules, the same
	// cursors, usable with either.
	q := listQuery(limit, map[string]string{"user_id": userID, "status": status, "channel": channel, "created_after": after, "created_before": before, "cursor": cursor})
	known, err := knownChannelSpecs(cfg)
	if err != nil {
		return err
	}
	f, err := api.ParseListFilter(q, known)
	if err != nil {
		return paramFlagError("notifications list", "", err)
	}
	st, closeStore, err := openAPIOrDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	page, err := st.List(ctx, f) // its error says "list notifications"
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, api.NewPageView(f, page))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED_AT\tSTATUS\tATTEMPTS\tUSER_ID\tCHANNEL\tTO\tSUBJECT")
	for _, n := range page.Items {
		subject := oneLine(n.Subject, 50)
		if subject == "" {
			subject = "-" // a channel without one
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", n.ID, n.CreatedAt.UTC().Format(time.RFC3339), n.StatusAt(time.Now()), n.Attempts,
			oneLine(n.UserID, 40), n.Channel, oneLine(n.To, 40), subject)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != nil {
		fmt.Fprintf(e.stderr, "%d notification(s); next page: --cursor %s\n", len(page.Items), f.EncodeCursor(*page.Next))
	} else {
		fmt.Fprintf(e.stderr, "%d notification(s); no more pages\n", len(page.Items))
	}
	return nil
}

func cmdNotificationsShow(ctx context.Context, args []string, e env) error {
	return showNotification(ctx, "notifications show", "Shows one notification with its body, why it waits (while its destination is failing or disabled), and its delivery attempts, oldest first, a page at a time as GET /notifications/{id}/attempts answers them: herald notifications show ID.", args, e, nil)
}

// showNotification is notifications show and dlq show (as name): one
// notification, its body and a page of its attempts; after, when not nil,
// is called with the notification once it is printed.
func showNotification(ctx context.Context, name, help string, args []string, e env, after func(notify.Notification)) error {
	var (
		asJSON        bool
		attemptsLimit int
		attemptsFrom  string
	)
	cfg, rest, err := parseConfig(name, help, args, e,
		func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, `print {"notification": {...}, "attempts": [...], "attempts_next_cursor": "..."} as the API shows them`)
			fs.IntVar(&attemptsLimit, "attempts-limit", api.DefaultListLimit, "attempts shown, from 1 to "+strconv.Itoa(api.MaxListLimit))
			fs.StringVar(&attemptsFrom, "attempts-cursor", "", "show the attempts after the previous page (its next cursor)")
		})
	if err != nil {
		return err
	}
	id, err := oneID(name, rest)
	if err != nil {
		return err
	}
	f, err := api.ParseAttemptFilter(listQuery(attemptsLimit, map[string]string{"cursor": attemptsFrom}), id)
	if err != nil {
		return paramFlagError(name, "attempts-", err)
	}
	st, closeStore, err := openAPIOrDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	// The store's errors name the notification.
	n, err := st.Get(ctx, id)
	if err != nil {
		return err
	}
	page, err := st.AttemptPage(ctx, id, f)
	if err != nil {
		return err
	}
	attempts, next := page.Items, ""
	if page.Next != 0 {
		next = f.EncodeAttemptCursor(id, page.Next)
	}
	if asJSON {
		v := map[string]any{"notification": api.NewNotificationDetail(n), "attempts": api.NewAttemptViews(attempts)}
		if next != "" {
			v["attempts_next_cursor"] = next
		}
		if err := printJSON(e.stdout, v); err != nil {
			return err
		}
		if after != nil {
			after(n)
		}
		return nil
	}
	if after != nil {
		defer after(n)
	}
	if err := writeNotification(e.stdout, n); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nbody:\n%s\n", strings.TrimRight(n.Body, "\n"))
	if len(attempts) == 0 {
		if f.After != 0 {
			fmt.Fprintln(e.stdout, "\nno more delivery attempts")
		} else {
			fmt.Fprintln(e.stdout, "\nno delivery attempt yet")
		}
		return nil
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tMESSAGE_ID\tSTARTED_AT\tFINISHED_AT\tOUTCOME\tERROR")
	for _, a := range attempts {
		finished, outcome := "-", a.Outcome
		if a.FinishedAt != nil {
			finished = a.FinishedAt.UTC().Format(time.RFC3339Nano)
		}
		if outcome == "" {
			outcome = "in flight"
		}
		if a.Repeats > 0 && a.LastAt != nil {
			outcome += fmt.Sprintf(" (+%d more until %s)", a.Repeats, a.LastAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\n", a.Attempt, a.MessageID, a.StartedAt.UTC().Format(time.RFC3339Nano), finished, outcome, oneLine(a.Error, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(e.stderr, "%d attempt(s) shown; more: --attempts-cursor %s\n", len(attempts), next)
	}
	return nil
}

// canceler is what notifications cancel uses: the database, or (with
// --api-url) the API through the Go client.
type canceler interface {
	Cancel(ctx context.Context, id int64) (notify.Notification, error)
}

// cmdNotificationsCancel cancels a pending or scheduled notification, as
// POST /notifications/{id}/cancel does, and prints it.
func cmdNotificationsCancel(ctx context.Context, args []string, e env) error {
	const name = "notifications cancel"
	var asJSON bool
	cfg, rest, err := parseConfig(name, "Cancels a pending or scheduled notification: no send of it starts afterwards, even when its event is already in a broker; it ends canceled with the status event notification.canceled. Canceling a canceled one changes nothing. A sent, failed or expired one cannot be canceled, nor one a worker is sending right now: herald notifications cancel ID.", args, e,
		func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print the notification as the API shows it")
		})
	if err != nil {
		return err
	}
	id, err := oneID(name, rest)
	if err != nil {
		return err
	}
	var c canceler
	if cfg.APIURL != "" {
		ac, err := newAPIClient(cfg)
		if err != nil {
			return err
		}
		c = ac
	} else {
		st, closeStore, err := openMigrated(ctx, cfg)
		if err != nil {
			return err
		}
		defer closeStore()
		c = st
	}
	n, err := c.Cancel(ctx, id)
	switch {
	case errors.Is(err, notify.ErrNotCancelable):
		return fmt.Errorf("notification %d is %s: only a pending or scheduled notification can be canceled", id, n.Status)
	case errors.Is(err, notify.ErrSendInProgress):
		return fmt.Errorf("notification %d is being sent right now and may be delivered; show it again once it has settled", id)
	case err != nil:
		return err
	}
	if asJSON {
		return printJSON(e.stdout, api.NewNotificationDetail(n))
	}
	return writeNotification(e.stdout, n)
}

// Cancel cancels through the API; its 409s are the store's errors.
func (a apiClient) Cancel(ctx context.Context, id int64) (notify.Notification, error) {
	n, err := a.c.Cancel(ctx, notify.FormatID(id))
	if e, ok := errors.AsType[*apiclient.Error](err); ok {
		switch e.Code {
		case apiclient.CodeNotCancelable:
			cur, gerr := a.Get(ctx, id)
			if gerr != nil {
				return notify.Notification{}, gerr
			}
			return cur, notify.ErrNotCancelable
		case apiclient.CodeSendInProgress:
			return notify.Notification{}, notify.ErrSendInProgress
		}
	}
	if err != nil {
		return notify.Notification{}, fromAPIError(err)
	}
	return fromClient(n)
}

// writeNotification prints a notification's fields, one per line, as
// `notifications show` and `dlq show` do: the fields its channel has (a
// subject only for a channel with one, email), and what its to is (an
// email address, an http(s) URL, a chat id).
func writeNotification(w io.Writer, n notify.Notification) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	spec, known := registeredSpecs()[n.Channel]
	row("id", notify.FormatID(n.ID))
	row("status", string(n.StatusAt(time.Now())))
	row("user_id", n.UserID)
	row("channel", n.Channel)
	switch {
	case known && spec.To != "":
		row("to", n.To+"  ("+spec.To+")")
	default:
		row("to", n.To)
	}
	if spec.Subject || n.Subject != "" {
		row("subject", n.Subject)
	}
	row("priority", string(n.Priority.OrDefault()))
	if n.Category != "" {
		row("category", n.Category)
	}
	if n.Template != "" {
		locale := n.Locale
		if locale == "" {
			locale = "default"
		}
		row("template", fmt.Sprintf("%s version %d, locale %s", n.Template, n.TemplateVersion, locale))
	}
	if len(n.Fallback) > 0 {
		row("fallback", strings.Join(notify.HopChannels(n.Fallback), ", ")+"  (the channels still to come if this one is dead-lettered)")
	}
	if n.FallbackOf != 0 {
		row("fallback_of", notify.FormatID(n.FallbackOf))
	}
	if n.FallbackNext != 0 {
		row("fallback_next", notify.FormatID(n.FallbackNext))
	}
	row("attempts", strconv.Itoa(n.Attempts))
	row("last_error", n.LastError)
	if w := n.Waiting; w != nil {
		row("waiting", fmt.Sprintf("destination %s %s since %s: %s", w.Destination, w.State, w.Since.UTC().Format(time.RFC3339), oneLine(w.Reason, 120)))
	}
	row("created_at", n.CreatedAt.UTC().Format(time.RFC3339Nano))
	row("updated_at", n.UpdatedAt.UTC().Format(time.RFC3339Nano))
	if n.SentAt != nil {
		row("sent_at", n.SentAt.UTC().Format(time.RFC3339Nano))
	}
	if n.FailedAt != nil {
		row("failed_at", n.FailedAt.UTC().Format(time.RFC3339Nano))
	}
	for _, t := range []struct {
		k string
		v *time.Time
	}{{"send_at", n.SendAt}, {"expires_at", n.ExpiresAt}, {"canceled_at", n.CanceledAt}, {"expired_at", n.ExpiredAt}} {
		if t.v != nil {
			row(t.k, t.v.UTC().Format(time.RFC3339Nano))
		}
	}
	return tw.Flush()
}

// reader is what the read commands read: the database, or (with
// --api-url) the API through the Go client. Both give the same values, so
// the commands print the same either way.
type reader interface {
	List(ctx context.Context, f notify.ListFilter) (notify.ListPage, error)
	Get(ctx context.Context, id int64) (notify.Notification, error)
	AttemptPage(ctx context.Context, id int64, f notify.AttemptFilter) (notify.AttemptPage, error)
}

// paramFlagError turns the API's complaint about a query parameter, built from
// cmd's flags, into a usage error naming the flag: --, prefix, then the
// parameter with its underscores as dashes. Any other error is returned
// as is.
func paramFlagError(cmd, prefix string, err error) error {
	if pe, ok := errors.AsType[*api.ParamError](err); ok {
		return usageError{fmt.Errorf("%s: --%s%s: %s", cmd, prefix, strings.ReplaceAll(pe.Field, "_", "-"), pe.Message)}
	}
	return err
}

// apiOrDatabase is what the read and destinations commands use: the
// database, or (with --api-url) the API through the Go client.
type apiOrDatabase interface {
	reader
	destinationAdmin
}

// openAPIOrDatabase opens the API's client when cfg names an API, the
// migrated database otherwise, and its close func.
func openAPIOrDatabase(ctx context.Context, cfg Config) (apiOrDatabase, func(), error) {
	if cfg.APIURL != "" {
		c, err := newAPIClient(cfg)
		if err != nil {
			return nil, nil, err
		}
		return c, func() {}, nil
	}
	st, closeStore, err := openMigrated(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return st, closeStore, nil
}

// apiClient reads and redrives through the API.
type apiClient struct{ c *apiclient.Client }

func newAPIClient(cfg Config) (apiClient, error) {
	c, err := apiclient.New(cfg.APIURL, apiclient.WithToken(cfg.APIToken))
	if err != nil {
		return apiClient{}, usageError{fmt.Errorf("--api-url (HERALD_API_URL): %w", err)}
	}
	return apiClient{c}, nil
}

// List asks for the page f selects; the cursors are the API's, which the
// filter encodes and decodes as the database path does.
func (a apiClient) List(ctx context.Context, f notify.ListFilter) (notify.ListPage, error) {
	opts := apiclient.ListOptions{
		UserID: f.UserID, Status: apiclient.Status(f.Status), Channel: f.Channel,
		CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore, Limit: f.Limit,
	}
	if f.After != nil {
		opts.Cursor = f.EncodeCursor(*f.After)
	}
	p, err := a.c.List(ctx, opts)
	if err != nil {
		return notify.ListPage{}, fromAPIError(err)
	}
	var out notify.ListPage
	for _, n := range p.Items {
		nn, err := fromClient(n)
		if err != nil {
			return notify.ListPage{}, err
		}
		out.Items = append(out.Items, nn)
	}
	if p.NextCursor != "" {
		pos, err := f.DecodeCursor(p.NextCursor)
		if err != nil {
			return notify.ListPage{}, fmt.Errorf("the API's next cursor: %w", err)
		}
		out.Next = &pos
	}
	return out, nil
}

// Get asks for one notification with its body.
func (a apiClient) Get(ctx context.Context, id int64) (notify.Notification, error) {
	n, err := a.c.Get(ctx, notify.FormatID(id))
	if err != nil {
		return notify.Notification{}, fromAPIError(err)
	}
	return fromClient(n)
}

// AttemptPage asks for a page of a notification's delivery attempts; the
// cursors are the API's, which the filter encodes and decodes as the
// database path does.
func (a apiClient) AttemptPage(ctx context.Context, id int64, f notify.AttemptFilter) (notify.AttemptPage, error) {
	opts := apiclient.AttemptOptions{Limit: f.Limit}
	if f.After != 0 {
		opts.Cursor = f.EncodeAttemptCursor(id, f.After)
	}
	p, err := a.c.AttemptPage(ctx, notify.FormatID(id), opts)
	if err != nil {
		return notify.AttemptPage{}, fromAPIError(err)
	}
	out := notify.AttemptPage{Items: make([]notify.Attempt, 0, len(p.Items))}
	for _, at := range p.Items {
		mid, ok := notify.ParseID(at.MessageID)
		if !ok {
			return notify.AttemptPage{}, fmt.Errorf("the API answered a message id %q", at.MessageID)
		}
		out.Items = append(out.Items, notify.Attempt{Attempt: at.Attempt, MessageID: mid, StartedAt: at.StartedAt, FinishedAt: at.FinishedAt,
			Outcome: at.Outcome, Error: at.Error, Repeats: at.Repeats, LastAt: at.LastAt})
	}
	if p.NextCursor != "" {
		if out.Next, err = f.DecodeAttemptCursor(id, p.NextCursor); err != nil {
			return notify.AttemptPage{}, fmt.Errorf("the API's next cursor: %w", err)
		}
	}
	return out, nil
}

// fromAPIError turns the API's 404 into notify.ErrNotFound, as the
// database path reports it.
func fromAPIError(err error) error {
	if e, ok := errors.AsType[*apiclient.Error](err); ok && e.StatusCode == http.StatusNotFound {
		return notify.ErrNotFound
	}
	return err
}

// fromClient is the notification the API showed.
func fromClient(n apiclient.Notification) (notify.Notification, error) {
	id, ok := notify.ParseID(n.ID)
	if !ok {
		return notify.Notification{}, fmt.Errorf("the API answered a notification id %q", n.ID)
	}
	return notify.Notification{
		ID: id, UserID: n.UserID, Channel: n.Channel, To: n.To, Subject: n.Subject, Body: n.Body,
		Status: notify.Status(n.Status), Attempts: n.Attempts, LastError: n.LastError,
		CreatedAt: n.CreatedAt, UpdatedAt: n.UpdatedAt, SentAt: n.SentAt, FailedAt: n.FailedAt,
		SendAt: n.SendAt, ExpiresAt: n.ExpiresAt, CanceledAt: n.CanceledAt, ExpiredAt: n.ExpiredAt,
		Priority: notify.Priority(n.Priority).OrDefault(),
		Waiting:  fromClientWaiting(n.Waiting),
		Category: n.Category, HTML: n.HTML,
		Template: n.Template, TemplateVersion: n.TemplateVersion, Locale: n.Locale,
		Fallback: hopsOf(n.FallbackChannels), FallbackOf: optionalID(n.FallbackOf), FallbackNext: optionalID(n.FallbackNext),
	}, nil
}

// hopsOf is the hops a view's fallback_channels name (only their
// channels: a view shows no hop's address or content).
func hopsOf(channels []string) []notify.Hop {
	var hops []notify.Hop
	for _, c := range channels {
		hops = append(hops, notify.Hop{Channel: c})
	}
	return hops
}

// optionalID is the id s names, 0 for "" (or anything not an id).
func optionalID(s string) int64 {
	id, _ := notify.ParseID(s)
	return id
}

func fromClientWaiting(w *apiclient.Waiting) *notify.Waiting {
	if w == nil {
		return nil
	}
	return &notify.Waiting{Destination: w.Destination, State: w.State, Reason: w.Reason, Since: w.Since.UTC()}
}

// printJSON prints v indented, without HTML escaping, as the API writes.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// oneID is the one notification id the command name takes as its argument,
// or a usage error.
func oneID(name string, rest []string) (int64, error) {
	if len(rest) != 1 {
		return 0, usageError{fmt.Errorf("%s takes one notification id (run 'herald %s --help')", name, name)}
	}
	id, ok := notify.ParseID(rest[0])
	if !ok {
		return 0, usageError{fmt.Errorf("%s: %q is not a notification id", name, rest[0])}
	}
	return id, nil
}
