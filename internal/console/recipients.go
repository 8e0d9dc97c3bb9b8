package console

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/heraldhq/herald/internal/notify"
)

// Recipients reads a user's recipient record and preferences, and records
// one preference. The stores implement it, as for GET /recipients/{user_id}
// and its preferences.
type Recipients interface {
	// Recipient returns one recipient, or notify.ErrNotFound.
	Recipient(ctx context.Context, userID string) (notify.Recipient, error)
	// Preferences returns a user's preferences (none: an empty set).
	Preferences(ctx context.Context, userID string) (notify.Preferences, error)
	// SetPreference records one preference of a user, leaving the others
	// (what a preference link's POST does).
	SetPreference(ctx context.Context, userID, category, channel string, allowed bool) error
}

// recipientsData is the Recipients page: the look-up form and, for the
// user it names, their record and preferences.
type recipientsData struct {
	// UserID is the user looked up ("" before any); UserError why it
	// cannot be.
	UserID, UserError string
	// Recipient is the user's record, nil when they have none; Addresses
	// its addresses, one row per channel.
	Recipient *notify.Recipient
	Addresses []addressRow
	// Preferences are the user's, by category then channel.
	Preferences []preferenceRow
	// Required are the categories no one may opt out of; Channels the
	// channels the form offers.
	Required, Channels []string
	// Changed says what the form just recorded; Error why it did not.
	Changed, Error string
	// The change form's fields, as given.
	Category, Channel string
}

// preferenceRow is one preference as the page lists it.
type preferenceRow struct {
	Category, Channel string
	Allowed, Required bool
}

// addressRow is one address of a recipient as the page lists it.
type addressRow struct {
	// Channel is the channel's name (the row's id is recipient-CHANNEL);
	// Label what the row is called; Address the address, "" for none.
	Channel, Label, Address string
}

// addressRows are the rows of rec's addresses, by channel name: one for
// each channel of known with a recipient field, as GET
// /recipients/{user_id} shows them, and one for each other channel rec
// holds an address for (one herald no longer knows), so that the page
// hides nothing the record holds.
func addressRows(known notify.Channels, rec notify.Recipient) []addressRow {
	labels := map[string]string{}
	for _, f := range known.RecipientFields() {
		labels[f.Channel] = fieldLabel(f.Field)
	}
	for ch := range rec.Addresses {
		if _, ok := labels[ch]; !ok && rec.Address(ch) != "" {
			labels[ch] = fieldLabel(ch + "_address")
		}
	}
	rows := make([]addressRow, 0, len(labels))
	for _, ch := range slices.Sorted(maps.Keys(labels)) {
		rows = append(rows, addressRow{Channel: ch, Label: labels[ch], Address: rec.Address(ch)})
	}
	return rows
}

// fieldLabel is a JSON field name for people: "telegram_chat_id" is
// "Telegram chat id", "webhook_url" "Webhook URL".
func fieldLabel(field string) string {
	words := strings.Split(field, "_")
	for i, w := range words {
		switch {
		case w == "url":
			words[i] = "URL"
		case i == 0 && w != "":
			r, n := utf8.DecodeRuneInString(w)
			words[i] = string(unicode.ToUpper(r)) + w[n:]
		}
	}
	return strings.Join(words, " ")
}

// recipients handles GET /ui/recipients[?user_id=]: a user's recipient
// record as the API shows it (nothing masked: the operator is the API
// token's holder) and their preferences, each with a button that flips
// it. Neither the user id nor the record is logged.
func (c *Console) recipients(w http.ResponseWriter, r *http.Request) {
	c.renderRecipients(w, r, http.StatusOK, recipientsData{UserID: r.URL.Query().Get("user_id")})
}

// renderRecipients fills d for d.UserID and renders the page.
func (c *Console) renderRecipients(w http.ResponseWriter, r *http.Request, status int, d recipientsData) {
	d.Required = c.cfg.RequiredCategories
	d.Channels = c.cfg.Channels.Names()
	if d.UserID == "" {
		c.render(w, r, status, "recipients", d)
		return
	}
	if err := notify.CheckText("user_id", d.UserID, notify.MaxUserIDLen); err != nil {
		d.UserError = err.Error()
		c.render(w, r, http.StatusBadRequest, "recipients", d)
		return
	}
	rec, err := c.cfg.Recipients.Recipient(r.Context(), d.UserID)
	switch {
	case err == nil:
		d.Recipient = &rec
		d.Addresses = addressRows(c.cfg.KnownChannels, rec)
	case errors.Is(err, notify.ErrNotFound):
	default:
		c.unavailable(w, r, "read recipient", err)
		return
	}
	p, err := c.cfg.Recipients.Preferences(r.Context(), d.UserID)
	if err != nil {
		c.unavailable(w, r, "read preferences", err)
		return
	}
	for _, cat := range slices.Sorted(maps.Keys(p)) {
		for _, ch := range slices.Sorted(maps.Keys(p[cat])) {
			d.Preferences = append(d.Preferences, preferenceRow{Category: cat, Channel: ch, Allowed: p[cat][ch],
				Required: slices.Contains(c.cfg.RequiredCategories, cat)})
		}
	}
	c.render(w, r, status, "recipients", d)
}

// setPreference handles the preference form (POST
// /ui/recipients/preferences): it records one preference of the user,
// leaving the others, with the checks of PUT
// /recipients/{user_id}/preferences (a category name, a channel the
// server takes, no opt-out of a required category), then shows the user
// again. A refused change is shown on the page and changes nothing.
func (c *Console) setPreference(w http.ResponseWriter, r *http.Request) {
	if !c.acceptForm(w, r) {
		return
	}
	f := r.PostForm
	d := recipientsData{UserID: f.Get("user_id"), Category: f.Get("category"), Channel: f.Get("channel")}
	if err := notify.CheckText("user_id", d.UserID, notify.MaxUserIDLen); err != nil {
		d.UserError = err.Error()
		c.renderRecipients(w, r, http.StatusBadRequest, d)
		return
	}
	allowed, err := strconv.ParseBool(f.Get("allowed"))
	switch {
	case err != nil:
		d.Error = "Choose whether the user takes the category on the channel."
	case !notify.ValidCategory(d.Category):
		d.Error = fmt.Sprintf("%q is not a category name: 1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit.", clip(d.Category))
	case !slices.Contains(c.cfg.Channels.Names(), d.Channel):
		d.Error = fmt.Sprintf("%q is not a channel of this server.", clip(d.Channel))
	case !allowed && slices.Contains(c.cfg.RequiredCategories, d.Category):
		d.Error = fmt.Sprintf("Category %q is required (HERALD_REQUIRED_CATEGORIES): no one may opt out of it.", d.Category)
	}
	if d.Error != "" {
		c.renderRecipients(w, r, http.StatusUnprocessableEntity, d)
		return
	}
	if err := c.cfg.Recipients.SetPreference(r.Context(), d.UserID, d.Category, d.Channel, allowed); err != nil {
		c.unavailable(w, r, "set preference", err)
		return
	}
	how := "opted out of"
	if allowed {
		how = "takes"
	}
	d.Changed = fmt.Sprintf("The user now %s %s by %s.", how, d.Category, d.Channel)
	d.Category, d.Channel = "", ""
	c.renderRecipients(w, r, http.StatusOK, d)
}

// clip shortens what a form echoes back.
func clip(s string) string {
	const most = 100
	for i := range s {
		if i >= most {
			return s[:i] + "..."
		}
	}
	return s
}

// recipientLink is the Recipients page of a user.
func recipientLink(userID string) string {
	return Prefix + "/recipients?" + url.Values{"user_id": {userID}}.Encode()
}
