package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// page is what every template gets: the layout's needs and the page's data.
type page struct {
	Title string
	Nav   string
	CSRF  string
	Auth  bool
	// Destinations: the console serves the Destinations page.
	Destinations bool
	// Templates: the console serves the Templates page.
	Templates bool
	// Recipients: the console serves the Recipients page.
	Recipients bool
	Data       any
}

type errorPage struct {
	Title   string
	Message string
}

var pageTitles = map[string][2]string{
	"login":         {"Log in", ""},
	"error":         {"", ""},
	"overview":      {"Overview", "overview"},
	"notifications": {"Notifications", "notifications"},
	"detail":        {"Notification", "notifications"},
	"deadletters":   {"Dead letters", "deadletters"},
	"confirm":       {"Confirm redrive", "deadletters"},
	"redriven":      {"Redrive result", "deadletters"},
	"destinations":  {"Destinations", "destinations"},
	"templates":     {"Templates", "templates"},
	"recipients":    {"Recipients", "recipients"},
}

func parseTemplates() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for name := range pageTitles {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// render writes a whole page. It renders into a buffer first, so that a
// template failure is a clean 500, never half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	p := page{Title: pageTitles[name][0], Nav: pageTitles[name][1], CSRF: c.csrfToken(w, r), Auth: c.cfg.Token != "",
		Destinations: c.cfg.Destinations != nil, Templates: c.cfg.Templates != nil, Recipients: c.cfg.Recipients != nil, Data: data}
	if e, ok := data.(errorPage); ok {
		p.Title = e.Title
	}
	c.write(w, status, c.pages[name], "layout.html", p)
}

func (c *Console) write(w http.ResponseWriter, status int, t *template.Template, name string, data any) {
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		c.log.Error("console: render", "template", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// unavailable answers a page whose data the store did not give: the error
// is logged, the page only says so (a driver error may quote a DSN).
func (c *Console) unavailable(w http.ResponseWriter, r *http.Request, op string, err error) {
	c.log.Error("console: "+op, "err", err)
	c.render(w, r, http.StatusServiceUnavailable, "error", errorPage{Title: "Store unavailable", Message: "The store did not answer (" + op + "). Try again shortly."})
}

// stamp is a time as the pages show it: UTC in the markup (and on hover),
// the browser's zone once the script has run.
type stamp struct {
	ISO, UTC string
}

var funcs = template.FuncMap{
	"recipientLink": recipientLink,
	"stamp": func(v any) *stamp {
		var t time.Time
		switch x := v.(type) {
		case time.Time:
			t = x
		case *time.Time:
			if x == nil {
				return nil
			}
			t = *x
		default:
			return nil
		}
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &stamp{ISO: t.Format(time.RFC3339Nano), UTC: t.Format("2006-01-02 15:04:05 UTC")}
	},
	"id": notify.FormatID,
	// shown is a notification's status as shown now: scheduled while
	// its send_at is ahead (notify.StatusAt).
	"shown": func(n notify.Notification) notify.Status { return n.StatusAt(time.Now()) },
	// cancelable is whether the Cancel button applies: pending or
	// scheduled.
	"cancelable": func(n notify.Notification) bool { return n.Status == notify.StatusPending },
	// dateInput is a time filter as a datetime-local input shows it.
	"dateInput": dateInput,
}

// --- overview ---

type overviewData struct {
	Backlog     int64
	OldestAge   string
	DeadLetters int64
	SentHour    int64
	FailedHour  int64
	SendersHere bool
	Senders     []SenderState
	Reconciled  string
	Chart       chart
	At          time.Time
	RefreshMS   int64
	// Deployment is the whole deployment's state, when the console reads
	// it (Config.Deployment).
	Deployment *deploymentView
}

func (c *Console) overviewData(r *http.Request) (overviewData, error) {
	ctx := r.Context()
	now := time.Now().UTC()
	st, err := c.stats.OutboxStats(ctx)
	if err != nil {
		return overviewData{}, err
	}
	start := now.Truncate(time.Minute).Add(-59 * time.Minute)
	act, err := c.stats.Activity(ctx, start)
	if err != nil {
		return overviewData{}, err
	}
	d := overviewData{
		Backlog: st.Unprocessed, DeadLetters: st.DeadLetters, FailedHour: act.Failed,
		At: now, RefreshMS: c.cfg.RefreshEvery.Milliseconds(), Chart: newChart(start, act),
	}
	if st.Unprocessed > 0 {
		d.OldestAge = st.OldestAge.Round(time.Second).String()
	}
	for _, n := range act.Delivered {
		d.SentHour += n
	}
	if c.cfg.Deployment != nil {
		dep, err := c.cfg.Deployment.Read(ctx)
		if err != nil {
			return overviewData{}, err
		}
		d.Deployment = newDeploymentView(dep)
	} else if c.cfg.Senders != nil {
		d.Senders, d.SendersHere = c.cfg.Senders()
	}
	d.Reconciled = c.reconciled()
	return d, nil
}

// reconciled reads herald_reconciled_total from the process's registry:
// the reconciler runs in the API's process.
func (c *Console) reconciled() string {
	if c.cfg.Metrics == nil {
		return ""
	}
	mfs, err := c.cfg.Metrics.Gather()
	if err != nil {
		return ""
	}
	for _, mf := range mfs {
		if mf.GetName() != "herald_reconciled_total" {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		return strconv.FormatFloat(sum, 'f', -1, 64)
	}
	return ""
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	d, err := c.overviewData(r)
	if err != nil {
		c.unavailable(w, r, "overview", err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", d)
}

// overviewFragment is the overview's body alone, which the script fetches
// to refresh the page without reloading it.
func (c *Console) overviewFragment(w http.ResponseWriter, r *http.Request) {
	d, err := c.overviewData(r)
	if err != nil {
		c.log.Error("console: overview", "err", err)
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	c.write(w, http.StatusOK, c.pages["overview"], "overview-body", d)
}

// --- notifications ---

// listFields are the filters the list's form has; an error about another
// parameter is shown above the form.
var listFields = []string{"user_id", "status", "channel", "created_after", "created_before", "limit", "cursor"}

type listData struct {
	Query url.Values
	// Channels are the channel filter's choices.
	Channels  []string
	Errors    map[string]string
	FormError string
	Items     []notify.Notification
	Next      string
	First     string
	Searched  bool
}

// cleanQuery drops the parameters a form sends empty (a filter left
// blank): the API refuses an empty value, the form means "no filter".
func cleanQuery(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		if len(vs) == 1 && vs[0] == "" {
			continue
		}
		out[k] = vs
	}
	return out
}

// timeFilters are the list's time filters: the form's datetime-local
// inputs send them without a zone, links (and the API) in RFC 3339.
var timeFilters = []string{"created_after", "created_before"}

// The values a datetime-local input sends: minutes, or seconds (a
// fraction after the seconds parses too).
const (
	localMinute = "2006-01-02T15:04"
	localSecond = "2006-01-02T15:04:05"
)

// parseLocal reads a datetime-local input's value, in UTC (the label says
// so).
func parseLocal(v string) (time.Time, bool) {
	for _, layout := range []string{localMinute, localSecond} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// utcFilters rewrites the time filters a datetime-local input sent into
// the RFC 3339 the API's rules take; RFC 3339 values (links made before
// the inputs, or by hand) and anything else pass as they are, so the
// API's rules judge them.
func utcFilters(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		out[k] = vs
		if len(vs) != 1 || !slices.Contains(timeFilters, k) {
			continue
		}
		if t, ok := parseLocal(vs[0]); ok {
			out[k] = []string{t.Format(time.RFC3339Nano)}
		}
	}
	return out
}

// dateInput is a time filter's value as a datetime-local input takes it:
// in UTC, to the second; "" when it is no time (the input could not show
// it: the field's error quotes it).
func dateInput(v string) string {
	if t, ok := parseLocal(v); ok {
		return t.Format(localSecond)
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC().Format(localSecond)
	}
	return ""
}

func (c *Console) notifications(w http.ResponseWriter, r *http.Request) {
	q := cleanQuery(r.URL.Query())
	d := listData{Query: q, Channels: c.cfg.Channels.Names(), Errors: map[string]string{}}
	f, err := c.cfg.Filters.Notifications(utcFilters(q), c.cfg.Channels)
	if err != nil {
		msg, field := err.Error(), paramOf(err)
		if slices.Contains(timeFilters, field) && dateInput(q.Get(field)) == "" {
			// A date input cannot hold what the link gave: say it.
			msg += " (the link gave " + strconv.Quote(q.Get(field)) + ")"
		}
		if slices.Contains(listFields, field) {
			d.Errors[field] = msg
		} else {
			d.FormError = msg
		}
		c.render(w, r, http.StatusBadRequest, "notifications", d)
		return
	}
	p, err := c.notes.List(r.Context(), f)
	if err != nil {
		c.unavailable(w, r, "list notifications", err)
		return
	}
	d.Items, d.Searched = p.Items, true
	rest := url.Values{}
	for k, vs := range q {
		if k != "cursor" {
			rest[k] = vs
		}
	}
	if q.Has("cursor") {
		d.First = Prefix + "/notifications?" + rest.Encode()
	}
	if p.Next != nil {
		rest.Set("cursor", f.EncodeCursor(*p.Next))
		d.Next = Prefix + "/notifications?" + rest.Encode()
	}
	c.render(w, r, http.StatusOK, "notifications", d)
}

// historyEntry is one step of a notification's status history.
type historyEntry struct {
	At     time.Time
	Status string
	Note   string
}

type detailData struct {
	N notify.Notification
	// Attempts are a page of the attempts, newest first; OlderAttempts,
	// when not empty, is the link to the next (older) page, and Older
	// tells that this page is not the newest.
	Attempts      []notify.Attempt
	OlderAttempts string
	Older         bool
	History       []historyEntry
	// MessageID is the email Message-ID of every attempt.
	MessageID string
}

// noSuchNotification is the page of a notification id that is malformed
// or names none.
var noSuchNotification = errorPage{Title: "Not found", Message: "There is no such notification."}

// notificationID returns the notification id of r's path. A malformed id
// is not found, as an unknown one is: it renders the 404 page and reports
// false.
func (c *Console) notificationID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, ok := notify.ParseID(r.PathValue("id"))
	if !ok {
		c.render(w, r, http.StatusNotFound, "error", noSuchNotification)
	}
	return id, ok
}

func (c *Console) detail(w http.ResponseWriter, r *http.Request) {
	id, ok := c.notificationID(w, r)
	if !ok {
		return
	}
	n, err := c.notes.Get(r.Context(), id)
	switch {
	case errors.Is(err, notify.ErrNotFound):
		c.render(w, r, http.StatusNotFound, "error", noSuchNotification)
		return
	case err != nil:
		c.unavailable(w, r, "read notification", err)
		return
	}
	f := notify.AttemptFilter{Limit: detailAttempts, Newest: true}
	if v := r.URL.Query().Get("attempts"); v != "" {
		if f.After, err = f.DecodeAttemptCursor(id, v); err != nil {
			c.render(w, r, http.StatusBadRequest, "error", errorPage{Title: "Bad link",
				Message: "That link to older attempts is not one this console made for this notification."})
			return
		}
	}
	p, err := c.notes.AttemptPage(r.Context(), id, f)
	if err != nil && !errors.Is(err, notify.ErrNotFound) {
		c.unavailable(w, r, "read attempts", err)
		return
	}
	d := detailData{N: n, Attempts: p.Items, Older: f.After != 0}
	if p.Next != 0 {
		d.OlderAttempts = Prefix + "/notifications/" + notify.FormatID(id) + "?attempts=" + url.QueryEscape(f.EncodeAttemptCursor(id, p.Next)) + "#attempts"
	}
	chrono := slices.Clone(p.Items)
	slices.Reverse(chrono)
	d.History = history(n, chrono)
	if n.Channel == notify.ChannelEmail {
		d.MessageID = notify.MessageID(notify.FormatID(n.ID), c.cfg.From)
	}
	c.render(w, r, http.StatusOK, "detail", d)
}

// detailAttempts is how many attempts a notification's page shows at once,
// the newest first; a link leads to the older ones.
const detailAttempts = 20

// history is the status history the store's record implies: herald keeps
// the times of the create, of every attempt, of the send and of the
// dead-lettering, not a log of transitions. A redrive shows as attempts
// after a dead attempt, and the notification pending again.
func history(n notify.Notification, as []notify.Attempt) []historyEntry {
	h := []historyEntry{{At: n.CreatedAt, Status: "pending", Note: "created"}}
	for _, a := range as {
		if last := h[len(h)-1]; last.Status == "failed" {
			// Only a redrive gives a dead letter another attempt.
			h = append(h, historyEntry{At: a.StartedAt, Status: "pending", Note: "redriven (shown at the next attempt's start)"})
		}
		if a.FinishedAt == nil {
			h = append(h, historyEntry{At: a.StartedAt, Status: "pending", Note: fmt.Sprintf("attempt %d in flight", a.Attempt)})
			continue
		}
		switch a.Outcome {
		case notify.AttemptSent:
			h = append(h, historyEntry{At: *a.FinishedAt, Status: "sent", Note: fmt.Sprintf("attempt %d sent", a.Attempt)})
		case notify.AttemptDead:
			h = append(h, historyEntry{At: *a.FinishedAt, Status: "failed", Note: fmt.Sprintf("attempt %d failed for good: dead-lettered", a.Attempt)})
		case notify.AttemptRetry:
			h = append(h, historyEntry{At: *a.FinishedAt, Status: "pending", Note: fmt.Sprintf("attempt %d failed: retry scheduled", a.Attempt)})
		case notify.AttemptDeferred:
			h = append(h, historyEntry{At: *a.FinishedAt, Status: "pending", Note: fmt.Sprintf("attempt %d deferred: the provider was unavailable", a.Attempt)})
			if a.Repeats > 0 && a.LastAt != nil {
				h = append(h, historyEntry{At: *a.LastAt, Status: "pending", Note: fmt.Sprintf("deferred %d more times since (the provider still unavailable), the latest here", a.Repeats)})
			}
		default:
			h = append(h, historyEntry{At: *a.FinishedAt, Status: "pending", Note: fmt.Sprintf("attempt %d deferred: the provider was unavailable", a.Attempt)})
		}
	}
	if n.FailedAt != nil && (len(h) == 0 || h[len(h)-1].Status != "failed") {
		h = append(h, historyEntry{At: *n.FailedAt, Status: "failed", Note: "dead-lettered"})
	}
	if last := h[len(h)-1]; last.Status == "failed" && n.Status == notify.StatusPending {
		h = append(h, historyEntry{At: n.UpdatedAt, Status: "pending", Note: "redriven: waiting for its next attempt"})
	}
	return h
}

// --- dead letters ---

// dlParams are the dead-letter listing's filters, as GET /dead-letters
// takes them.
var dlParams = []string{"since", "error", "limit"}

const (
	defaultDeadLetterLimit = 100
	maxDeadLetterLimit     = 10000
)

type deadLettersData struct {
	Query     url.Values
	Errors    map[string]string
	FormError string
	Items     []notify.Notification
	Searched  bool
}

// deadLetterFilter reads since, error and limit with the rules of GET
// /dead-letters and POST /dead-letters/redrive; the error names the field.
func deadLetterFilter(q url.Values) (notify.DeadLetterFilter, string, string) {
	var f notify.DeadLetterFilter
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return f, "since", "since must be a positive duration like 24h"
		}
		f.Since = time.Now().Add(-d)
	}
	f.ErrorContains = q.Get("error")
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxDeadLetterLimit {
			return f, "limit", "limit must be an integer from 1 to " + strconv.Itoa(maxDeadLetterLimit)
		}
		f.Limit = n
	}
	return f, "", ""
}

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := cleanQuery(r.URL.Query())
	d := deadLettersData{Query: q, Errors: map[string]string{}}
	for k := range q {
		if !slices.Contains(dlParams, k) {
			d.FormError = "unknown filter " + strconv.Quote(k) + ": the filters are since, error and limit"
			c.render(w, r, http.StatusBadRequest, "deadletters", d)
			return
		}
	}
	f, field, msg := deadLetterFilter(q)
	if field != "" {
		d.Errors[field] = msg
		c.render(w, r, http.StatusBadRequest, "deadletters", d)
		return
	}
	if f.Limit == 0 {
		f.Limit = defaultDeadLetterLimit
	}
	ns, err := c.dead.List(r.Context(), f)
	if err != nil {
		c.unavailable(w, r, "list dead letters", err)
		return
	}
	d.Items, d.Searched = ns, true
	c.render(w, r, http.StatusOK, "deadletters", d)
}

type confirmData struct {
	IDs      []string
	All      bool
	Query    url.Values
	Selected int
	Named    int
	// Will are the dead letters the redrive would send again (the dry
	// run's), at most maxShownIDs of them; More counts the rest.
	Will []int64
	More int
	// From is the notification whose page the redrive was asked from
	// (its Redrive button), to go back to; "" from the dead letters.
	From string
}

// maxShownIDs caps the ids a confirmation lists: "all that match" may
// be thousands.
const maxShownIDs = 100

type redrivenData struct {
	Selected int
	Redriven []int64
	Skipped  []skipView
	Removed  int
	From     string
}

type skipView struct {
	ID     int64
	Reason string
}

// skipReasons say in words why a redrive skipped a notification.
var skipReasons = map[string]string{
	notify.SkipNotFound:    "skipped: no such notification",
	notify.SkipNotFailed:   "skipped: no longer failed (pending or sent; it is never sent twice)",
	notify.SkipFilteredOut: "skipped: left out by the filters",
}

// redrive handles the dead-letter form: step "confirm" says how many would
// be sent again (a dry run); step "redrive" redrives, as POST
// /dead-letters/redrive does, and says what became of each.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request) {
	if !c.acceptForm(w, r) {
		return
	}
	form := r.PostForm
	q := url.Values{}
	for _, k := range dlParams {
		if v := form.Get(k); v != "" {
			q.Set(k, v)
		}
	}
	back := deadLettersData{Query: q, Errors: map[string]string{}}
	f, field, msg := deadLetterFilter(q)
	if field != "" {
		back.Errors[field] = msg
		c.render(w, r, http.StatusBadRequest, "deadletters", back)
		return
	}
	all := form.Get("all") == "1"
	var ids []int64
	for _, s := range form["id"] {
		id, ok := notify.ParseID(s)
		if !ok {
			back.FormError = "ids must be notification ids"
			c.render(w, r, http.StatusBadRequest, "deadletters", back)
			return
		}
		ids = append(ids, id)
	}
	// from: the notification page's Redrive button names its notification,
	// to go back to it.
	from := ""
	if id, ok := notify.ParseID(form.Get("from")); ok && !all && len(ids) == 1 && ids[0] == id {
		from = notify.FormatID(id)
	}
	sel := notify.RedriveSelection{All: all}
	switch {
	case all:
		// Every dead letter the filters match, as the listing showed them.
		sel.Filter = f
	case len(ids) > 0:
		sel.Filter = notify.DeadLetterFilter{IDs: ids}
	default:
		back.FormError = "Select dead letters to redrive, or all that match the filters."
		c.render(w, r, http.StatusBadRequest, "deadletters", back)
		return
	}
	if form.Get("step") != "redrive" {
		sel.DryRun = true
		res, err := c.dead.Redrive(r.Context(), sel)
		if err != nil {
			c.unavailable(w, r, "redrive (dry run)", err)
			return
		}
		d := confirmData{All: all, Query: q, Selected: res.Selected, Named: len(ids), From: from}
		for _, id := range ids {
			d.IDs = append(d.IDs, notify.FormatID(id))
		}
		d.Will = res.Redriven
		if len(d.Will) > maxShownIDs {
			d.Will, d.More = d.Will[:maxShownIDs], len(d.Will)-maxShownIDs
		}
		c.render(w, r, http.StatusOK, "confirm", d)
		return
	}
	res, err := c.dead.Redrive(r.Context(), sel)
	if err != nil {
		c.unavailable(w, r, "redrive", err)
		return
	}
	skips, err := notify.ExplainSkips(r.Context(), c.notes.Get, sel.Filter.IDs, res)
	if err != nil {
		c.unavailable(w, r, "redrive", err)
		return
	}
	d := redrivenData{Selected: res.Selected, Redriven: res.Redriven, Removed: res.RemovedFromQueue, From: from}
	for _, s := range skips {
		reason := skipReasons[s.Reason]
		if reason == "" {
			reason = "skipped: " + s.Reason
		}
		d.Skipped = append(d.Skipped, skipView{ID: s.ID, Reason: reason})
	}
	c.render(w, r, http.StatusOK, "redriven", d)
}

// --- chart ---

// chart is the overview's created-vs-delivered chart: one point per minute
// of the last hour, drawn as SVG on the server (no script needed), with the
// same figures in a table for screen readers and for the curious.
type chart struct {
	Created, Delivered string // SVG polyline points
	Max                int64
	Rows               []chartRow
	// Ticks mark the time axis: every ten minutes of the clock, in UTC.
	Ticks []chartTick
}

// chartTick is one mark of the time axis. X is a percentage of the
// chart's width, so the labels are laid out at the width the page has,
// never stretched with the lines.
type chartTick struct {
	X      string
	Label  string
	Anchor string // text-anchor: the first and last labels stay inside
}

type chartRow struct {
	Minute             time.Time
	Created, Delivered int64
}

const (
	chartW, chartH = 600, 150
	// chartTickEvery is the time axis's step, in minutes of the clock.
	chartTickEvery = 10
)

func newChart(start time.Time, a notify.Activity) chart {
	var ch chart
	for i := range 60 {
		m := start.Add(time.Duration(i) * time.Minute)
		row := chartRow{Minute: m, Created: a.Created[m], Delivered: a.Delivered[m]}
		ch.Max = max(ch.Max, row.Created, row.Delivered)
		ch.Rows = append(ch.Rows, row)
	}
	top := max(ch.Max, 1)
	var cp, dp strings.Builder
	for i, row := range ch.Rows {
		x := float64(i) * chartW / 59
		fmt.Fprintf(&cp, "%.1f,%.1f ", x, chartH-float64(row.Created)*chartH/float64(top))
		fmt.Fprintf(&dp, "%.1f,%.1f ", x, chartH-float64(row.Delivered)*chartH/float64(top))
	}
	ch.Created, ch.Delivered = strings.TrimSpace(cp.String()), strings.TrimSpace(dp.String())
	for i, row := range ch.Rows {
		if row.Minute.Minute()%chartTickEvery != 0 {
			continue
		}
		pct := float64(i) * 100 / 59
		anchor := "middle"
		switch {
		case pct < 5:
			anchor = "start"
		case pct > 95:
			anchor = "end"
		}
		ch.Ticks = append(ch.Ticks, chartTick{X: fmt.Sprintf("%.2f%%", pct), Label: row.Minute.UTC().Format("15:04"), Anchor: anchor})
	}
	// Newest first in the table, as every list of the console.
	slices.Reverse(ch.Rows)
	return ch
}

// --- destinations ---

type destinationsData struct {
	Items []notify.Destination
	// State is the state filter ("" for any); Next, when not empty, is
	// the link to the next page, and More tells that this page is not the
	// first.
	State string
	Next  string
	More  bool
	// Enabled is the key just enabled, Error why an enable failed.
	Enabled, Error string
}

// destinationsPage is how many destinations the Destinations page shows
// at once.
const destinationsPage = 50

func (c *Console) destinations(w http.ResponseWriter, r *http.Request) {
	c.renderDestinations(w, r, http.StatusOK, destinationsData{})
}

func (c *Console) renderDestinations(w http.ResponseWriter, r *http.Request, status int, d destinationsData) {
	q := url.Values{}
	if r.Method == http.MethodGet {
		q = cleanQuery(r.URL.Query())
	}
	f, err := c.cfg.Filters.Destinations(q)
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "error", errorPage{Title: "Bad link", Message: err.Error()})
		return
	}
	f.Limit = destinationsPage
	p, err := c.cfg.Destinations.ListDestinations(r.Context(), f)
	if err != nil {
		c.unavailable(w, r, "list destinations", err)
		return
	}
	d.Items, d.State, d.More = p.Items, f.State, f.After != ""
	if p.Next != "" {
		next := url.Values{"cursor": {f.EncodeCursor(p.Next)}}
		if f.State != "" {
			next.Set("state", f.State)
		}
		d.Next = Prefix + "/destinations?" + next.Encode()
	}
	c.render(w, r, status, "destinations", d)
}

// cancelNotification handles the Cancel button, as POST
// /notifications/{id}/cancel does, then shows the notification again
// (303 to its page); a notification that cannot be canceled is a 409 page
// that says why.
func (c *Console) cancelNotification(w http.ResponseWriter, r *http.Request) {
	if !c.acceptForm(w, r) {
		return
	}
	id, ok := c.notificationID(w, r)
	if !ok {
		return
	}
	n, err := c.notes.Cancel(r.Context(), id)
	switch {
	case errors.Is(err, notify.ErrNotFound):
		c.render(w, r, http.StatusNotFound, "error", noSuchNotification)
	case errors.Is(err, notify.ErrNotCancelable):
		c.render(w, r, http.StatusConflict, "error", errorPage{Title: "Not canceled",
			Message: "Notification " + notify.FormatID(id) + " is " + string(n.Status) + ": only a pending or scheduled notification can be canceled."})
	case errors.Is(err, notify.ErrSendInProgress):
		c.render(w, r, http.StatusConflict, "error", errorPage{Title: "Not canceled",
			Message: "Notification " + notify.FormatID(id) + " is being sent right now and may be delivered. Look again once it has settled."})
	case err != nil:
		c.unavailable(w, r, "cancel notification", err)
	default:
		http.Redirect(w, r, Prefix+"/notifications/"+notify.FormatID(id), http.StatusSeeOther)
	}
}

// enableDestination handles the Enable button, as POST
// /destinations/{key}/enable does.
func (c *Console) enableDestination(w http.ResponseWriter, r *http.Request) {
	if !c.acceptForm(w, r) {
		return
	}
	key := r.PostForm.Get("key")
	if key == "" {
		c.renderDestinations(w, r, http.StatusBadRequest, destinationsData{Error: "Name the destination to enable."})
		return
	}
	err := c.cfg.Destinations.EnableDestination(r.Context(), key)
	switch {
	case errors.Is(err, notify.ErrNotFound):
		c.renderDestinations(w, r, http.StatusNotFound, destinationsData{Error: key + " has no failing or disabled record: it is up."})
	case err != nil:
		c.unavailable(w, r, "enable destination", err)
	default:
		c.renderDestinations(w, r, http.StatusOK, destinationsData{Enabled: key})
	}
}
