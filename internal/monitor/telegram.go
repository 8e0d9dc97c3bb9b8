package monitor

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// TelegramConfig sends alerts to a Telegram chat through the Bot API as well
// as to the log.
type TelegramConfig struct {
	// Token is the bot token. Required. It is part of the request path, so
	// it never appears in a log record or an error.
	Token string
	// ChatID is the chat to write to. Required.
	ChatID string
	// API is the Bot API base URL; tests point it at a local server.
	// Default https://api.telegram.org.
	API string
	// Client sends the requests. Default: an http.Client with a 10s
	// timeout, so a hung Telegram cannot stall sampling for long.
	Client *http.Client
}

func (c TelegramConfig) withDefaults() TelegramConfig {
	c.API = cmp.Or(c.API, "https://api.telegram.org")
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	return c
}

func (c TelegramConfig) validate() error {
	switch {
	case c.Token == "":
		return errors.New("telegram token is required")
	case c.ChatID == "":
		return errors.New("telegram chat id is required")
	}
	u, err := url.Parse(c.API)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("telegram api %q is not an http(s) URL", c.API)
	}
	return nil
}

// telegram posts messages to one chat.
type telegram struct {
	cfg      TelegramConfig
	endpoint string
}

func newTelegram(cfg TelegramConfig) *telegram {
	return &telegram{
		cfg:      cfg,
		endpoint: strings.TrimRight(cfg.API, "/") + "/bot" + cfg.Token + "/sendMessage",
	}
}

// send posts text to the chat. Errors never contain the token: net/http
// puts the full URL into its errors, so they are rewritten here rather than
// trusted to every caller.
func (t *telegram) send(ctx context.Context, text string) error {
	body, err := json.Marshal(struct {
		ChatID string `json:"chat_id"`
		Text   string `json:"text"`
	}{t.cfg.ChatID, text})
	if err != nil {
		return fmt.Errorf("telegram sendMessage: encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("telegram sendMessage: %s", t.redact(err.Error()))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.cfg.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("telegram sendMessage: %s", t.redact(err.Error()))
	}
	defer resp.Body.Close()
	// The Bot API answers {"ok": false, "description": ...} with a 4xx on
	// a bad token or chat; the description is what an operator needs.
	var reply struct {
		OK          bool   `json:"ok"`
		Description string `json:"description"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(raw, &reply)
	if resp.StatusCode/100 != 2 {
		msg := reply.Description
		if msg == "" {
			msg = strings.TrimSpace(string(raw))
		}
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		return fmt.Errorf("telegram sendMessage: status %d: %s", resp.StatusCode, t.redact(msg))
	}
	return nil
}

// redact removes the token from s.
func (t *telegram) redact(s string) string {
	return strings.ReplaceAll(s, t.cfg.Token, "REDACTED")
}
