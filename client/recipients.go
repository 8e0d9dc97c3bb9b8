package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Recipient is where a user is reached (PUT /recipients/{user_id}). A
// create for the user may leave To empty: the address of its channel is
// taken from here at create.
type Recipient struct {
	UserID         string    `json:"user_id"`
	Email          string    `json:"email"`
	TelegramChatID string    `json:"telegram_chat_id"`
	WebhookURL     string    `json:"webhook_url"`
	Locale         string    `json:"locale"`
	TimeZone       string    `json:"time_zone"`
	Revision       int64     `json:"revision"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// PutRecipient creates or replaces the recipient r.UserID (the whole
// record: an empty field is emptied) and returns it as stored. Putting
// the same record twice does no harm, so it is retried like a read.
func (c *Client) PutRecipient(ctx context.Context, r Recipient) (Recipient, error) {
	body := struct {
		Email          string `json:"email"`
		TelegramChatID string `json:"telegram_chat_id"`
		WebhookURL     string `json:"webhook_url"`
		Locale         string `json:"locale"`
		TimeZone       string `json:"time_zone"`
	}{r.Email, r.TelegramChatID, r.WebhookURL, r.Locale, r.TimeZone}
	var out Recipient
	_, err := c.do(ctx, request{method: http.MethodPut, path: "/recipients/" + url.PathEscape(r.UserID), body: body, repeatable: true}, &out)
	return out, err
}

// Recipient returns one recipient; an unknown one is an *Error with Code
// CodeNotFound.
func (c *Client) Recipient(ctx context.Context, userID string) (Recipient, error) {
	var out Recipient
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/recipients/" + url.PathEscape(userID), repeatable: true}, &out)
	return out, err
}

// DeleteRecipient deletes a recipient's record; an unknown one is an
// *Error with Code CodeNotFound.
func (c *Client) DeleteRecipient(ctx context.Context, userID string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/recipients/" + url.PathEscape(userID)}, nil)
	return err
}

// TemplateVersion is one version of a template: one channel and locale's
// parts (PUT /templates/{name}).
type TemplateVersion struct {
	Name    string `json:"name,omitempty"`
	Channel string `json:"channel"`
	// Locale is a BCP 47 tag, or "" for the default variant.
	Locale  string `json:"locale"`
	Version int    `json:"version,omitempty"`
	Subject string `json:"subject,omitempty"`
	Text    string `json:"text"`
	HTML    string `json:"html,omitempty"`
	// CreatedAt is set on versions the API answers with.
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// Template is a template as of a version: for each channel and locale,
// its newest variant at or below it.
type Template struct {
	Name          string            `json:"name"`
	LatestVersion int               `json:"latest_version"`
	Variants      []TemplateVersion `json:"variants"`
}

// Preview is what a template renders to (POST /templates/{name}/preview).
type Preview struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	Channel string `json:"channel"`
	Locale  string `json:"locale"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	HTML    string `json:"html"`
}

// PutTemplate stores v as the next version of the template name and
// returns it with its version number. Each call is a new version, so a
// call that got no answer is not sent again.
func (c *Client) PutTemplate(ctx context.Context, name string, v TemplateVersion) (TemplateVersion, error) {
	v.Name, v.Version, v.CreatedAt = "", 0, nil
	var out TemplateVersion
	_, err := c.do(ctx, request{method: http.MethodPut, path: "/templates/" + url.PathEscape(name), body: v}, &out)
	return out, err
}

// Template returns the template name as of version (0: its newest).
func (c *Client) Template(ctx context.Context, name string, version int) (Template, error) {
	q := url.Values{}
	if version > 0 {
		q.Set("version", strconv.Itoa(version))
	}
	var out Template
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/templates/" + url.PathEscape(name), query: q, repeatable: true}, &out)
	return out, err
}

// Templates returns every template as of its newest version.
func (c *Client) Templates(ctx context.Context) ([]Template, error) {
	var out struct {
		Items []Template `json:"items"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/templates", repeatable: true}, &out)
	return out.Items, err
}

// PreviewTemplate renders the template name for a recipient with locale,
// with data (a value that encodes as a JSON object), and sends nothing.
// channel may be empty when the template has one channel.
func (c *Client) PreviewTemplate(ctx context.Context, name, channel, locale string, data any) (Preview, error) {
	var raw json.RawMessage
	if data != nil {
		b, err := marshal(data)
		if err != nil {
			return Preview{}, err
		}
		raw = b
	}
	body := struct {
		Locale  string          `json:"locale"`
		Channel string          `json:"channel,omitempty"`
		Data    json.RawMessage `json:"data,omitempty"`
	}{locale, channel, raw}
	var out Preview
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/templates/" + url.PathEscape(name) + "/preview", body: body, repeatable: true}, &out)
	return out, err
}

// Preferences are a user's choices: by category, then by channel, whether
// the user takes it (false: opted out). What is not listed is allowed.
type Preferences struct {
	UserID     string                     `json:"user_id"`
	Categories map[string]map[string]bool `json:"categories"`
	// RequiredCategories are the server's categories no one may opt out
	// of (HERALD_REQUIRED_CATEGORIES).
	RequiredCategories []string `json:"required_categories"`
}

// Preferences returns a user's preferences (none: an empty set).
func (c *Client) Preferences(ctx context.Context, userID string) (Preferences, error) {
	var out Preferences
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/recipients/" + url.PathEscape(userID) + "/preferences", repeatable: true}, &out)
	return out, err
}

// PutPreferences replaces every preference of a user with categories. An
// opt-out of a required category is an *Error with Code
// "required_category", and nothing is changed.
func (c *Client) PutPreferences(ctx context.Context, userID string, categories map[string]map[string]bool) (Preferences, error) {
	if categories == nil {
		categories = map[string]map[string]bool{}
	}
	body := struct {
		Categories map[string]map[string]bool `json:"categories"`
	}{categories}
	var out Preferences
	_, err := c.do(ctx, request{method: http.MethodPut, path: "/recipients/" + url.PathEscape(userID) + "/preferences", body: body, repeatable: true}, &out)
	return out, err
}

// PreferenceLink is a signed link that opts a user out of a category on a
// channel without a login.
type PreferenceLink struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// PreferenceLink makes a signed link that opts userID out of category on
// channel. With the server's links off (HERALD_LINK_SECRET unset) it is
// an *Error with Code "links_off".
func (c *Client) PreferenceLink(ctx context.Context, userID, category, channel string) (PreferenceLink, error) {
	body := struct {
		Category string `json:"category"`
		Channel  string `json:"channel"`
	}{category, channel}
	var out PreferenceLink
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/recipients/" + url.PathEscape(userID) + "/preferences/links", body: body, repeatable: true}, &out)
	return out, err
}
