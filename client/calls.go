package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Create sends a notification (POST /notifications). The answer means the
// notification and its delivery are recorded; it is sent asynchronously.
// Retries (429, 503, no answer) carry the same idempotency key, so they
// never create a second notification.
func (c *Client) Create(ctx context.Context, req CreateRequest) (Created, error) {
	key := req.IdempotencyKey
	if key == "" {
		key = NewIdempotencyKey()
	}
	var out Created
	h, err := c.do(ctx, request{
		method: http.MethodPost, path: "/notifications", body: req,
		header: http.Header{"Idempotency-Key": {key}}, repeatable: true,
	}, &out.Notification)
	if err != nil {
		return Created{}, err
	}
	out.Replayed = h.Get("Idempotent-Replayed") == "true"
	return out, nil
}

// Get returns one notification with its body (GET /notifications/{id}). An
// unknown id is an *Error with Code CodeNotFound.
func (c *Client) Get(ctx context.Context, id string) (Notification, error) {
	var n Notification
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/notifications/" + url.PathEscape(id), repeatable: true}, &n)
	return n, err
}

// Cancel cancels a pending or scheduled notification (POST
// /notifications/{id}/cancel) and returns it, canceled: no send of it
// starts afterwards. Canceling twice answers the same, so it is retried
// like a read. A sent, failed or expired notification is an *Error with
// Code CodeNotCancelable (409); one a worker is sending right now,
// CodeSendInProgress (409); an unknown id, CodeNotFound.
func (c *Client) Cancel(ctx context.Context, id string) (Notification, error) {
	var n Notification
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/notifications/" + url.PathEscape(id) + "/cancel", repeatable: true}, &n)
	return n, err
}

// Attempts returns every delivery attempt of a notification, oldest first
// (GET /notifications/{id}/attempts, page after page).
func (c *Client) Attempts(ctx context.Context, id string) ([]Attempt, error) {
	out := []Attempt{}
	for a, err := range c.AllAttempts(ctx, id, AttemptOptions{Limit: 500}) {
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// AttemptPage returns one page of a notification's delivery attempts,
// oldest first (GET /notifications/{id}/attempts). Pass the page's
// NextCursor as opts.Cursor for the next.
func (c *Client) AttemptPage(ctx context.Context, id string, opts AttemptOptions) (AttemptPage, error) {
	q := pageQuery(opts.Limit, opts.Cursor, nil)
	var p AttemptPage
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/notifications/" + url.PathEscape(id) + "/attempts", query: q, repeatable: true}, &p)
	return p, err
}

// AllAttempts iterates over a notification's attempts, page after page,
// oldest first; it stops at the first error, which it yields.
func (c *Client) AllAttempts(ctx context.Context, id string, opts AttemptOptions) iter.Seq2[Attempt, error] {
	return pages(ctx, opts.Cursor, func(ctx context.Context, cursor string) ([]Attempt, string, error) {
		opts.Cursor = cursor
		p, err := c.AttemptPage(ctx, id, opts)
		return p.Items, p.NextCursor, err
	})
}

// List returns one page of notifications, newest first (GET
// /notifications). Pass the page's NextCursor as opts.Cursor for the next.
func (c *Client) List(ctx context.Context, opts ListOptions) (Page, error) {
	q := pageQuery(opts.Limit, opts.Cursor, map[string]string{
		"user_id":        opts.UserID,
		"status":         string(opts.Status),
		"channel":        opts.Channel,
		"created_after":  stamp(opts.CreatedAfter),
		"created_before": stamp(opts.CreatedBefore),
	})
	var p Page
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/notifications", query: q, repeatable: true}, &p)
	return p, err
}

// ListAll iterates over every notification opts selects, page after page,
// newest first; it stops at the first error, which it yields.
//
//	for n, err := range c.ListAll(ctx, client.ListOptions{Status: client.StatusFailed}) {
//		if err != nil { ... }
//	}
func (c *Client) ListAll(ctx context.Context, opts ListOptions) iter.Seq2[Notification, error] {
	return pages(ctx, opts.Cursor, func(ctx context.Context, cursor string) ([]Notification, string, error) {
		opts.Cursor = cursor
		p, err := c.List(ctx, opts)
		return p.Items, p.NextCursor, err
	})
}

// DeadLetters returns one page of dead letters, newest failure first (GET
// /dead-letters).
func (c *Client) DeadLetters(ctx context.Context, opts DeadLetterOptions) (DeadLetterPage, error) {
	since := ""
	if opts.Since != 0 {
		since = opts.Since.String()
	}
	q := pageQuery(opts.Limit, opts.Cursor, map[string]string{"since": since, "error": opts.Error})
	var p DeadLetterPage
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/dead-letters", query: q, repeatable: true}, &p)
	return p, err
}

// AllDeadLetters iterates over every dead letter opts selects, page after
// page; it stops at the first error, which it yields.
func (c *Client) AllDeadLetters(ctx context.Context, opts DeadLetterOptions) iter.Seq2[DeadLetter, error] {
	return pages(ctx, opts.Cursor, func(ctx context.Context, cursor string) ([]DeadLetter, string, error) {
		opts.Cursor = cursor
		p, err := c.DeadLetters(ctx, opts)
		return p.Items, p.NextCursor, err
	})
}

// Redrive sends dead letters again (POST /dead-letters/redrive): each goes
// back to pending with a fresh delivery; one that was sent is never sent
// twice. Sending the same redrive again does no harm (what was redriven is
// then skipped as not failed), so it is retried like a read.
func (c *Client) Redrive(ctx context.Context, req RedriveRequest) (RedriveResult, error) {
	var res RedriveResult
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/dead-letters/redrive", body: req, repeatable: true}, &res)
	return res, err
}

// Destinations lists every destination that is not up, by key (GET
// /destinations, page after page). A destination not listed is up.
func (c *Client) Destinations(ctx context.Context) ([]Destination, error) {
	out := []Destination{}
	for d, err := range c.AllDestinations(ctx, DestinationOptions{Limit: 500}) {
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// DestinationPage returns one page of the destinations that are not up,
// by key (GET /destinations). Pass the page's NextCursor as opts.Cursor
// for the next.
func (c *Client) DestinationPage(ctx context.Context, opts DestinationOptions) (DestinationPage, error) {
	q := pageQuery(opts.Limit, opts.Cursor, map[string]string{"state": opts.State})
	var p DestinationPage
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/destinations", query: q, repeatable: true}, &p)
	return p, err
}

// AllDestinations iterates over the destinations opts selects, page after
// page; it stops at the first error, which it yields.
func (c *Client) AllDestinations(ctx context.Context, opts DestinationOptions) iter.Seq2[Destination, error] {
	return pages(ctx, opts.Cursor, func(ctx context.Context, cursor string) ([]Destination, string, error) {
		opts.Cursor = cursor
		p, err := c.DestinationPage(ctx, opts)
		return p.Items, p.NextCursor, err
	})
}

// EnableDestination enables a failing or disabled destination (POST
// /destinations/{key}/enable): its record is removed and its deliveries
// go again. A destination without a record is an *Error with Code
// CodeNotFound. Enabling twice does no harm, so it is retried like a read.
func (c *Client) EnableDestination(ctx context.Context, key string) error {
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/destinations/" + url.PathEscape(key) + "/enable", repeatable: true}, nil)
	return err
}

// pages walks a cursor listing.
func pages[T any](ctx context.Context, cursor string, page func(context.Context, string) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			items, next, err := page(ctx, cursor)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			cursor = next
		}
	}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// pageQuery returns the query of a request for one page: the filters, and
// the page's limit and cursor. A filter whose value is empty, a zero limit
// and an empty cursor are left out, so that the server applies its default.
func pageQuery(limit int, cursor string, filters map[string]string) url.Values {
	q := url.Values{}
	for k, v := range filters {
		if v != "" {
			q.Set(k, v)
		}
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return q
}
