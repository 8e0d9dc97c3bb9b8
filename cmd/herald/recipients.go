package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	apiclient "github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/notify"
)

// The recipients and templates commands go through the API (their checks,
// the SSRF guard and the rendering live there): HERALD_API_URL, or the
// local API at HERALD_HTTP_ADDR when it is unset. The erasure goes to the
// database, as migrate does.

func cmdRecipients(ctx context.Context, args []string, e env) error {
	var put strings.Builder
	for _, f := range registeredSpecs().RecipientFields() {
		fmt.Fprintf(&put, " [--%s ADDRESS]", recipientFlag(f.Field))
	}
	return subcommands(ctx, args, e, "Usage: herald recipients put USER_ID"+put.String()+" [--locale L] [--time-zone Z]\n       herald recipients get USER_ID\n       herald recipients delete USER_ID\n       herald recipients erase USER_ID\n       herald recipients preferences USER_ID [--set CATEGORY.CHANNEL=true|false ...]\n\nRun 'herald recipients SUBCOMMAND --help' for its flags.",
		map[string]func(context.Context, []string, env) error{"put": cmdRecipientsPut, "get": cmdRecipientsGet, "delete": cmdRecipientsDelete, "erase": cmdRecipientsErase,
			"preferences": cmdRecipientsPreferences})
}

func cmdTemplates(ctx context.Context, args []string, e env) error {
	return subcommands(ctx, args, e, "Usage: herald templates put NAME --channel C [--locale L] [--subject S] --text T [--html H]\n       herald templates get [NAME] [--version N]\n       herald templates preview NAME [--locale L] [--channel C] [--data JSON]\n\nRun 'herald templates SUBCOMMAND --help' for its flags.",
		map[string]func(context.Context, []string, env) error{"put": cmdTemplatesPut, "get": cmdTemplatesGet, "preview": cmdTemplatesPreview})
}

// apiOf is the client of the API the command talks to: HERALD_API_URL,
// or the local one at HERALD_HTTP_ADDR.
func apiOf(cfg Config) (*apiclient.Client, error) {
	u := cfg.APIURL
	if u == "" {
		u = localURL(cfg.HTTPAddr)
	}
	c, err := apiclient.New(u, apiclient.WithToken(cfg.APIToken))
	if err != nil {
		return nil, usageError{fmt.Errorf("--api-url (HERALD_API_URL): %w", err)}
	}
	return c, nil
}

// oneArg is the one positional argument of cmd, named what.
func oneArg(cmd, what string, rest []string) (string, error) {
	if len(rest) != 1 || rest[0] == "" {
		return "", usageError{fmt.Errorf("%s takes one %s", cmd, what)}
	}
	return rest[0], nil
}

// recipientFlag is the herald recipients put flag of a recipient's JSON
// field: its name with dashes for underscores.
func recipientFlag(field string) string { return strings.ReplaceAll(field, "_", "-") }

func cmdRecipientsPut(ctx context.Context, args []string, e env) error {
	var r apiclient.Recipient
	specs := registeredSpecs()
	fields := specs.RecipientFields()
	addrs := make(map[string]*string, len(fields))
	cfg, rest, err := parseConfig("recipients put", "Creates or replaces a recipient through the API (PUT /recipients/{user_id}): herald recipients put USER_ID --email ADDRESS ... The whole record is replaced: a flag left out empties its field.",
		args, e, func(fs *flag.FlagSet) {
			for _, f := range fields {
				addrs[f.Field] = fs.String(recipientFlag(f.Field), "", fmt.Sprintf("the user's address on the %s channel: %s", f.Channel, specs[f.Channel].To))
			}
			fs.StringVar(&r.Locale, "locale", "", "BCP 47 language tag (de, pt-BR): the template variant the user receives")
			fs.StringVar(&r.TimeZone, "time-zone", "", "IANA time zone: the zone of quiet hours given without one")
		})
	if err != nil {
		return err
	}
	if err := setAddresses(&r, addrs); err != nil {
		return err
	}
	if r.UserID, err = oneArg("recipients put", "user id", rest); err != nil {
		return err
	}
	c, err := apiOf(cfg)
	if err != nil {
		return err
	}
	out, err := c.PutRecipient(ctx, r)
	if err != nil {
		return explainUnauthorized(err, tokenGiven(e, args))
	}
	return printJSON(e.stdout, out)
}

// setAddresses sets each address of addrs, by JSON field, on r: the
// client's Recipient is a typed copy of the API's fields, and a channel
// whose field it lacks is an error, not an address dropped without a word.
func setAddresses(r *apiclient.Recipient, addrs map[string]*string) error {
	m := make(map[string]string, len(addrs))
	for field, a := range addrs {
		m[field] = *a
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(r); err != nil {
		return fmt.Errorf("recipients put: the Go client's Recipient lacks a channel's address field: %w", err)
	}
	return nil
}

// userClient reads the settings and flags (extra) of a recipients command
// that names one user and goes through the API, and returns the user id
// and the API's client.
func userClient(name, help string, args []string, e env, extra func(*flag.FlagSet)) (string, *apiclient.Client, error) {
	cfg, rest, err := parseConfig(name, help, args, e, extra)
	if err != nil {
		return "", nil, err
	}
	id, err := oneArg(name, "user id", rest)
	if err != nil {
		return "", nil, err
	}
	c, err := apiOf(cfg)
	if err != nil {
		return "", nil, err
	}
	return id, c, nil
}

func cmdRecipientsGet(ctx context.Context, args []string, e env) error {
	id, c, err := userClient("recipients get", "Prints a recipient as GET /recipients/{user_id} answers it: herald recipients get USER_ID.", args, e, nil)
	if err != nil {
		return err
	}
	out, err := c.Recipient(ctx, id)
	if err != nil {
		return explainUnauthorized(fromAPIError(err), tokenGiven(e, args))
	}
	return printJSON(e.stdout, out)
}

func cmdRecipientsDelete(ctx context.Context, args []string, e env) error {
	id, c, err := userClient("recipients delete", "Deletes a recipient's record (DELETE /recipients/{user_id}): its addresses, locale and time zone. Its notifications keep what they were accepted with: herald recipients erase anonymises them too.", args, e, nil)
	if err != nil {
		return err
	}
	if err := c.DeleteRecipient(ctx, id); err != nil {
		return explainUnauthorized(fromAPIError(err), tokenGiven(e, args))
	}
	fmt.Fprintf(e.stdout, "deleted recipient %s\n", id)
	return nil
}

// preferencesHelp says what the preferences command changes, and how.
const preferencesHelp = `Prints a user's preferences as GET /recipients/{user_id}/preferences answers them: herald recipients preferences USER_ID. With --set (repeatable) it changes those it names and keeps the others: herald recipients preferences 42 --set news.email=false --set digest.telegram=true. CATEGORY.CHANNEL splits at the last dot (a category may hold dots, a channel does not); false opts the user out, true opts back in. The changes are one PUT /recipients/{user_id}/preferences of the preferences as read with the changes applied: an opt-out of a required category or an unknown channel is refused and nothing is changed. The API replaces a user's preferences as a whole: a preference someone else changes between this command's read and its PUT (a one-click unsubscribe in that instant) is overwritten; the console's Recipients page changes one preference alone.`

// preferenceSet is one --set of herald recipients preferences.
type preferenceSet struct {
	category, channel string
	allowed           bool
}

// parsePreferenceSet reads CATEGORY.CHANNEL=true|false.
func parsePreferenceSet(v string) (preferenceSet, error) {
	key, val, ok := strings.Cut(v, "=")
	dot := strings.LastIndexByte(key, '.')
	if !ok || dot <= 0 || dot == len(key)-1 {
		return preferenceSet{}, fmt.Errorf("%q is not CATEGORY.CHANNEL=true|false", v)
	}
	allowed, err := strconv.ParseBool(val)
	if err != nil {
		return preferenceSet{}, fmt.Errorf("%q: %q is not true or false", v, val)
	}
	return preferenceSet{category: key[:dot], channel: key[dot+1:], allowed: allowed}, nil
}

func cmdRecipientsPreferences(ctx context.Context, args []string, e env) error {
	var sets []preferenceSet
	id, c, err := userClient("recipients preferences", preferencesHelp, args, e, func(fs *flag.FlagSet) {
		fs.Func("set", "CATEGORY.CHANNEL=true|false: opt the user back in to (true) or out of (false) a category on a channel; repeatable", func(v string) error {
			s, err := parsePreferenceSet(v)
			if err == nil {
				sets = append(sets, s)
			}
			return err
		})
	})
	if err != nil {
		return err
	}
	p, err := c.Preferences(ctx, id)
	if err != nil {
		return explainUnauthorized(err, tokenGiven(e, args))
	}
	if len(sets) == 0 {
		return printJSON(e.stdout, p)
	}
	cats := p.Categories
	if cats == nil {
		cats = map[string]map[string]bool{}
	}
	for _, s := range sets {
		if cats[s.category] == nil {
			cats[s.category] = map[string]bool{}
		}
		cats[s.category][s.channel] = s.allowed
	}
	out, err := c.PutPreferences(ctx, id, cats)
	if err != nil {
		return explainUnauthorized(err, tokenGiven(e, args))
	}
	return printJSON(e.stdout, out)
}

// eraseHelp says exactly what an erasure clears.
const eraseHelp = `Erases a user's personal data, for an erasure request, on the database (HERALD_DATABASE_URL): herald recipients erase USER_ID. First each of the user's notifications still pending is canceled (one whose send is under way is let finish and reported). Then, in one transaction (PostgreSQL, SQLite; MongoDB: document by document, run it again after a failure): the recipient record is deleted; on every notification of the user the address (to), subject, body, HTML part and last error are emptied; the errors of their delivery attempts are cleared; and in every outbox event of theirs the payload's to, subject, body, html and last_error are emptied, with the event's last error. The user id, statuses, times, attempt counts and idempotency keys stay. Running it twice is harmless.`

func cmdRecipientsErase(ctx context.Context, args []string, e env) error {
	var asJSON bool
	cfg, rest, err := parseConfig("recipients erase", eraseHelp, args, e, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, `print {"recipient", "notifications", "events", "attempts", "canceled", "in_flight"}`)
	})
	if err != nil {
		return err
	}
	id, err := oneArg("recipients erase", "user id", rest)
	if err != nil {
		return err
	}
	st, closeStore, err := openMigrated(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	var canceled, inFlight []int64
	f := notify.ListFilter{UserID: id, Status: notify.StatusPending, Limit: 500}
	for {
		page, err := st.List(ctx, f)
		if err != nil {
			return fmt.Errorf("list pending notifications: %w", err)
		}
		for _, n := range page.Items {
			_, err := st.Cancel(ctx, n.ID)
			switch {
			case err == nil:
				canceled = append(canceled, n.ID)
			case errors.Is(err, notify.ErrSendInProgress):
				inFlight = append(inFlight, n.ID)
			case errors.Is(err, notify.ErrNotCancelable), errors.Is(err, notify.ErrNotFound):
			default:
				return err
			}
		}
		if page.Next == nil {
			break
		}
		f.After = page.Next
	}
	out, err := st.EraseRecipient(ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, struct {
			notify.Erasure
			Canceled int     `json:"canceled"`
			InFlight []int64 `json:"in_flight"`
		}{out, len(canceled), inFlight})
	}
	fmt.Fprintf(e.stdout, "erased user %s: recipient record deleted: %t; %d notification(s), %d outbox event(s), %d attempt error(s) anonymised; %d pending notification(s) canceled\n",
		id, out.Recipient, out.Notifications, out.Events, out.Attempts, len(canceled))
	if len(inFlight) > 0 {
		fmt.Fprintf(e.stderr, "%d notification(s) had a send under way and were not canceled: %v\n", len(inFlight), inFlight)
	}
	return nil
}

// textFlag reads a template part given as text or, with a leading @, as
// the file it names.
func textFlag(v string) (string, error) {
	if !strings.HasPrefix(v, "@") {
		return v, nil
	}
	b, err := os.ReadFile(v[1:])
	if err != nil {
		return "", usageError{err}
	}
	return string(b), nil
}

func cmdTemplatesPut(ctx context.Context, args []string, e env) error {
	var v apiclient.TemplateVersion
	cfg, rest, err := parseConfig("templates put", "Puts a new version of a template through the API (PUT /templates/{name}): herald templates put NAME --channel email --locale de --subject S --text T [--html H]. A part given as @FILE is read from FILE. Prints the version made.",
		args, e, func(fs *flag.FlagSet) {
			fs.StringVar(&v.Channel, "channel", "", "email, webhook or telegram")
			fs.StringVar(&v.Locale, "locale", "", `BCP 47 language tag; "" is the default variant`)
			fs.StringVar(&v.Subject, "subject", "", "email subject (text/template)")
			fs.StringVar(&v.Text, "text", "", "text body (text/template); @FILE reads it from FILE")
			fs.StringVar(&v.HTML, "html", "", "email HTML part (html/template); @FILE reads it from FILE")
		})
	if err != nil {
		return err
	}
	name, err := oneArg("templates put", "template name", rest)
	if err != nil {
		return err
	}
	for _, p := range []*string{&v.Subject, &v.Text, &v.HTML} {
		if *p, err = textFlag(*p); err != nil {
			return err
		}
	}
	c, err := apiOf(cfg)
	if err != nil {
		return err
	}
	out, err := c.PutTemplate(ctx, name, v)
	if err != nil {
		return explainUnauthorized(err, tokenGiven(e, args))
	}
	return printJSON(e.stdout, out)
}

func cmdTemplatesGet(ctx context.Context, args []string, e env) error {
	var version int
	cfg, rest, err := parseConfig("templates get", "Prints a template as GET /templates/{name} answers it (herald templates get NAME [--version N]), or every template (herald templates get).",
		args, e, func(fs *flag.FlagSet) {
			fs.IntVar(&version, "version", 0, "the version to read the template as of (default: its newest)")
		})
	if err != nil {
		return err
	}
	if len(rest) > 1 {
		return usageError{errors.New("templates get takes at most one template name")}
	}
	c, err := apiOf(cfg)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		ts, err := c.Templates(ctx)
		if err != nil {
			return explainUnauthorized(err, tokenGiven(e, args))
		}
		return printJSON(e.stdout, ts)
	}
	t, err := c.Template(ctx, rest[0], version)
	if err != nil {
		return explainUnauthorized(fromAPIError(err), tokenGiven(e, args))
	}
	return printJSON(e.stdout, t)
}

func cmdTemplatesPreview(ctx context.Context, args []string, e env) error {
	var locale, channel, data string
	cfg, rest, err := parseConfig("templates preview", "Renders a template as a create would, and sends nothing (POST /templates/{name}/preview): herald templates preview NAME --locale de --data '{\"name\":\"Ada\"}'.",
		args, e, func(fs *flag.FlagSet) {
			fs.StringVar(&locale, "locale", "", "render for a recipient with this locale")
			fs.StringVar(&channel, "channel", "", "the channel, when the template has several")
			fs.StringVar(&data, "data", "", "the data, a JSON object; @FILE reads it from FILE")
		})
	if err != nil {
		return err
	}
	name, err := oneArg("templates preview", "template name", rest)
	if err != nil {
		return err
	}
	if data, err = textFlag(data); err != nil {
		return err
	}
	var d any
	if data != "" {
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			return usageError{fmt.Errorf("templates preview: --data is not JSON: %w", err)}
		}
	}
	c, err := apiOf(cfg)
	if err != nil {
		return err
	}
	p, err := c.PreviewTemplate(ctx, name, channel, locale, d)
	if err != nil {
		return explainUnauthorized(err, tokenGiven(e, args))
	}
	return printJSON(e.stdout, p)
}
