package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// MaxBatch is the most notifications CreateBatch sends in one request, the
// API's limit.
const MaxBatch = 1000

// BatchResult is the answer to one notification of a batch: created (or
// replayed), or refused alone.
type BatchResult struct {
	// StatusCode is the item's status: 201 (created, or replayed), 400,
	// 409, 413 or 422 (a recipient, address or template that does not
	// exist, a template that does not render).
	StatusCode int
	// ID is the notification's id when StatusCode is 201.
	ID string
	// Replayed is true when an earlier create with the item's idempotency
	// key was answered again: nothing new was written.
	Replayed bool
	// Suppressed is true when the item's user opted out of its category
	// on its channel: it is stored suppressed and never sent.
	Suppressed bool
	// Err is the item's error when StatusCode is not 201; its Field is a
	// path into the batch ("notifications[3].to").
	Err *Error
}

// CreateBatch sends up to MaxBatch notifications in one request (POST
// /notifications/batch), written in one transaction. It answers one result
// per request, in their order: a bad request fails alone, in its result.
// The error is for the batch as a whole (too many, the backlog, the store),
// and then nothing was written. Like Create, it gives every request without
// an IdempotencyKey a fresh one (in a copy: reqs is not changed), so that
// its own retries (429, 503, no answer) never create twice.
func (c *Client) CreateBatch(ctx context.Context, reqs []CreateRequest) ([]BatchResult, error) {
	if len(reqs) == 0 || len(reqs) > MaxBatch {
		return nil, fmt.Errorf("herald client: a batch holds 1 to %d notifications, not %d", MaxBatch, len(reqs))
	}
	items := make([]json.RawMessage, len(reqs))
	for i, r := range reqs {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("herald client: encode notification %d: %w", i, err)
		}
		key := r.IdempotencyKey
		if key == "" {
			key = NewIdempotencyKey()
		}
		k, err := marshal(key)
		if err != nil {
			return nil, fmt.Errorf("herald client: encode notification %d: %w", i, err)
		}
		// The request's body with the key added: {..., "idempotency_key": k}.
		b = bytes.TrimSuffix(b, []byte("}"))
		items[i] = append(append(append(b, `,"idempotency_key":`...), k...), '}')
	}
	var out struct {
		Results []struct {
			Status     int    `json:"status"`
			ID         string `json:"id"`
			Replayed   bool   `json:"replayed"`
			Suppressed bool   `json:"suppressed"`
			Error      *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Field   string `json:"field"`
			} `json:"error"`
		} `json:"results"`
	}
	_, err := c.do(ctx, request{
		method: http.MethodPost, path: "/notifications/batch",
		body: map[string][]json.RawMessage{"notifications": items}, repeatable: true,
	}, &out)
	if err != nil {
		return nil, err
	}
	if len(out.Results) != len(reqs) {
		return nil, fmt.Errorf("herald client: POST /notifications/batch: %d results for %d notifications", len(out.Results), len(reqs))
	}
	res := make([]BatchResult, len(reqs))
	for i, r := range out.Results {
		res[i] = BatchResult{StatusCode: r.Status, ID: r.ID, Replayed: r.Replayed, Suppressed: r.Suppressed}
		if r.Error != nil {
			res[i].Err = &Error{StatusCode: r.Status, Code: r.Error.Code, Message: r.Error.Message, Field: r.Error.Field}
		}
	}
	return res, nil
}
