package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/tracing"
)

// DefaultMaxBatchBytes is the default limit on a batch's request body:
// 16 MiB, a thousand creates of some 16 KiB each. A batch of a thousand
// items of the single create's 1 MiB would be a gigabyte held in memory
// at once; a larger broadcast is sent as more batches.
const DefaultMaxBatchBytes = 16 << 20

// batchFields are the keys a batch body may hold.
var batchFields = map[string]bool{"notifications": true}

// itemFields are the keys a batch item may hold: a create body's, and the
// item's own idempotency key (a header is the request's, not an item's).
var itemFields = func() map[string]bool {
	m := maps.Clone(requestFields)
	m[fieldIdempotencyKey] = true
	return m
}()

const fieldIdempotencyKey = "idempotency_key"

// itemBody is a batch item as decoded: a create body and its key.
type itemBody struct {
	*createBody
	IdempotencyKey *string `json:"idempotency_key"`
}

// batchResult is one item's answer: status 201 with the id (replayed when
// an earlier create with the item's key is answered again; suppressed when
// its user opted out of its category on its channel), or an error status
// with the error, its field a path into the batch ("notifications[3].to").
type batchResult struct {
	Status     int       `json:"status"`
	ID         string    `json:"id,omitempty"`
	Replayed   bool      `json:"replayed,omitempty"`
	Suppressed bool      `json:"suppressed,omitempty"`
	Error      *apiError `json:"error,omitempty"`
}

type batchReply struct {
	Results []batchResult `json:"results"`
}

// createBatch handles POST /notifications/batch: every item is decoded as
// a single create is (decodeInto), and resolved and checked as a single
// create is (resolve: the recipient's address, the template, the
// category's preference check, checkCreate); the valid ones are written in
// one store call (Notifications.CreateBatch: one transaction), and the answer, 207,
// holds one result per item in the request's order. What is wrong with the
// request as a whole (its headers, its size, its shape, more items than
// the limit) answers the one error, and so does a store failure or the
// debug fault: then nothing was written. As for a single create, a
// recipient that changed between its look-up and the write makes the
// batch resolve again (maxResolveTries in all): the store wrote nothing.
func (a *API) createBatch(w http.ResponseWriter, r *http.Request) {
	bases, reqs, decoded, aerr, status := a.readBatch(w, r)
	if aerr != nil {
		writeError(w, status, *aerr)
		return
	}
	var (
		results []batchResult
		valid   []int
		out     []notify.BatchResult
		err     error
	)
	// A broadcast names one template a thousand times: it is read once.
	ctx := withTemplateMemo(r.Context())
	for try := 0; ; try++ {
		results = slices.Clone(decoded)
		valid = valid[:0]
		var todo []notify.NewNotification
		for i := range results {
			if results[i].Status != 0 {
				continue
			}
			nn := bases[i]
			if e, status := a.resolve(ctx, &nn, reqs[i]); e != nil {
				if status == http.StatusServiceUnavailable {
					a.unavailable(w, r, "resolve notification batch", errors.New(e.Message))
					return
				}
				results[i] = itemError(i, status, *e)
				continue
			}
			valid = append(valid, i)
			todo = append(todo, nn)
		}
		if len(valid) == 0 {
			break
		}
		// As for a single create: validation first, then admission.
		if try == 0 && !a.admit(w, r) {
			return
		}
		out, err = a.createBatchTraced(r.Context(), todo)
		if !errors.Is(err, notify.ErrRecipientChanged) || try >= maxResolveTries-1 {
			break
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, notify.ErrInjectedFault):
		a.log.InfoContext(r.Context(), "batch create failed on purpose", "fault", notify.FaultAfterOutboxInsert)
		writeError(w, http.StatusInternalServerError, apiError{Code: "injected_fault", Message: "the batch failed on purpose (" + headerFault + "); nothing was written"})
		return
	case errors.Is(err, notify.ErrRecipientChanged):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, apiError{Code: "recipient_changed", Message: "a recipient of the batch kept changing during the create; nothing was written; retry"})
		return
	default:
		a.unavailable(w, r, "create notification batch", err)
		return
	}
	for k, i := range valid {
		res := out[k]
		if errors.Is(res.Err, notify.ErrConflict) {
			results[i] = itemError(i, http.StatusConflict, apiError{Code: "idempotency_conflict", Message: "the idempotency key was already used with a different request", Field: fieldIdempotencyKey})
			continue
		}
		n := res.Created.Notification
		results[i] = batchResult{Status: http.StatusCreated, ID: notify.FormatID(n.ID), Replayed: res.Created.Replayed,
			Suppressed: n.Status == notify.StatusSuppressed}
	}
	a.metrics.countBatch(results)
	writeJSON(w, http.StatusMultiStatus, batchReply{Results: results})
}

// readBatch checks a batch request's headers and body, and decodes every
// item. It returns each item's create headers (bases) and request (reqs),
// and a result for each: zero (Status 0) for an item that decoded, its
// error for another. On a failure of the whole request it returns the
// error to answer and its status.
func (a *API) readBatch(w http.ResponseWriter, r *http.Request) (bases []notify.NewNotification, reqs []notify.CreateRequest, results []batchResult, _ *apiError, _ int) {
	if e := checkContentType(r.Header.Values("Content-Type")); e != nil {
		return nil, nil, nil, e, http.StatusUnsupportedMediaType
	}
	if _, ok := r.Header[headerIdempotencyKey]; ok {
		return nil, nil, nil, &apiError{Code: "invalid_header", Message: "a batch takes no Idempotency-Key header: give each item its " + fieldIdempotencyKey, Field: headerIdempotencyKey}, http.StatusBadRequest
	}
	fault, e := a.fault(r.Header)
	if e != nil {
		return nil, nil, nil, e, http.StatusBadRequest
	}
	raw, e, status := readBody(w, r, a.cfg.MaxBatchBytes, ": send the notifications in more batches")
	if e != nil {
		return nil, nil, nil, e, status
	}
	items, e, status := a.decodeBatch(raw)
	if e != nil {
		return nil, nil, nil, e, status
	}
	bases = make([]notify.NewNotification, len(items))
	reqs = make([]notify.CreateRequest, len(items))
	results = make([]batchResult, len(items))
	requestID := notify.RequestIDFrom(r.Context())
	for i, item := range items {
		bases[i] = notify.NewNotification{RequestID: requestID, Fault: fault}
		if int64(len(item)) > a.cfg.MaxBodyBytes {
			results[i] = itemError(i, http.StatusRequestEntityTooLarge, apiError{Code: "too_large",
				Message: "the notification is larger than " + strconv.FormatInt(a.cfg.MaxBodyBytes, 10) + " bytes"})
			continue
		}
		if reqs[i], e = readItem(&bases[i], item, a.cfg.Channels); e != nil {
			status := http.StatusBadRequest
			if e.Code == "unsupported_in_batch" {
				status = http.StatusUnprocessableEntity
			}
			results[i] = itemError(i, status, *e)
		}
	}
	return bases, reqs, results, nil, 0
}

// decodeBatch reads the batch body's shape: one object with exactly the
// key notifications (spelled so, given once), a list of 1 to MaxBatch
// items, each kept as its JSON text for readItem. An item's own faults (an
// unknown key, an unpaired surrogate escape) are its own, not the batch's.
func (a *API) decodeBatch(raw []byte) ([]json.RawMessage, *apiError, int) {
	bad := func(msg string) ([]json.RawMessage, *apiError, int) {
		return nil, &apiError{Code: "invalid_json", Message: msg}, http.StatusBadRequest
	}
	if !utf8.Valid(raw) {
		return nil, &apiError{Code: "invalid_utf8", Message: "the request body is not valid UTF-8"}, http.StatusBadRequest
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err == io.EOF {
		return bad("the request body is empty")
	}
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return bad("the request body must be a JSON object")
	}
	var list json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("the request body is not valid JSON")
		}
		key, _ := tok.(string)
		if !batchFields[key] {
			key = clip(key, maxEchoLen)
			return nil, &apiError{Code: "unknown_field", Message: "unknown field " + strconv.Quote(key), Field: key}, http.StatusBadRequest
		}
		if list != nil {
			return nil, &apiError{Code: "invalid_field", Message: key + " is given more than once", Field: key}, http.StatusBadRequest
		}
		if err := dec.Decode(&list); err != nil {
			return bad("the request body is not valid JSON")
		}
	}
	if _, err := dec.Token(); err != nil {
		return bad("the request body is not valid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("the request body must hold one JSON object and nothing after it")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(list, &items); err != nil && list != nil {
		return nil, &apiError{Code: "invalid_field", Message: "notifications must be a list of notifications", Field: "notifications"}, http.StatusBadRequest
	}
	n := len(items)
	switch {
	case n == 0:
		return nil, &apiError{Code: "invalid_field", Message: "notifications must hold at least one notification", Field: "notifications"}, http.StatusBadRequest
	case n > a.cfg.MaxBatch:
		return nil, &apiError{Code: "too_large", Message: "a batch holds at most " + strconv.Itoa(a.cfg.MaxBatch) + " notifications; this one holds " + strconv.Itoa(n) + ": send them in more batches", Field: "notifications"}, http.StatusRequestEntityTooLarge
	}
	return items, nil, 0
}

// readItem decodes one item as a single create's body is (decodeInto),
// with its idempotency key into nn; createBatch resolves and checks it.
func readItem(nn *notify.NewNotification, raw []byte, channels notify.Channels) (notify.CreateRequest, *apiError) {
	var cb createBody
	ib := itemBody{createBody: &cb}
	req, e := decodeInto(raw, channels, itemFields, &ib, &cb)
	if e != nil {
		return req, e
	}
	if len(req.Channels) > 0 {
		// A fallback list makes hops the batch statements do not write:
		// a create with channels goes alone.
		return req, &apiError{Code: "unsupported_in_batch", Field: "channels",
			Message: "channels (a fallback list) is not supported in a batch: create notifications with channels one by one"}
	}
	if ib.IdempotencyKey != nil {
		if !validKey(*ib.IdempotencyKey) {
			return req, &apiError{Code: "invalid_field", Message: fieldIdempotencyKey + " must be 1 to 255 printable ASCII characters", Field: fieldIdempotencyKey}
		}
		nn.IdempotencyKey = *ib.IdempotencyKey
	}
	return req, nil
}

// itemError is the result of item i that failed with e: its field and
// message name the item.
func itemError(i int, status int, e apiError) batchResult {
	at := "notifications[" + strconv.Itoa(i) + "]"
	if e.Field != "" {
		e.Field = at + "." + e.Field
	} else {
		e.Field = at
	}
	e.Message = at + ": " + e.Message
	return batchResult{Status: status, Error: &e}
}

// createBatchTraced runs the batch's transaction in a span of its own,
// whose context every item's outbox event stores (see createTraced).
func (a *API) createBatchTraced(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	ctx, span := a.tracer.Start(ctx, "create notification batch", traceBatch(len(nns)))
	defer span.End()
	tp := tracing.Traceparent(ctx)
	for i := range nns {
		nns[i].Traceparent = tp
	}
	start := time.Now()
	out, err := a.store.CreateBatch(ctx, nns)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "create batch failed")
		return nil, err
	}
	if len(out) != len(nns) {
		return nil, errors.New("create batch: the store answered " + strconv.Itoa(len(out)) + " results to " + strconv.Itoa(len(nns)) + " requests")
	}
	if a.metrics != nil {
		tracing.Observe(ctx, a.metrics.batch, time.Since(start).Seconds())
	}
	return out, nil
}

func traceBatch(n int) trace.SpanStartOption {
	return trace.WithAttributes(attribute.Int("herald.batch_size", n))
}

// templateMemo holds the templates one request has read, by name and
// version pin, so that a batch reads each template once: its items then
// render the same version, as one create at one instant would.
type templateMemo struct {
	m map[templateKey]templateRead
}

type templateKey struct {
	name string
	pin  int
}

type templateRead struct {
	tpl notify.Template
	err error
}

type templateMemoKey struct{}

// withTemplateMemo returns ctx with an empty memo of templates read.
func withTemplateMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, templateMemoKey{}, &templateMemo{m: map[templateKey]templateRead{}})
}

// readTemplate reads the template name as of pin from ts, or from the
// request's memo (withTemplateMemo) when it was read before in the
// request. A store failure is not remembered.
func readTemplate(ctx context.Context, ts Templates, name string, pin int) (notify.Template, error) {
	memo, _ := ctx.Value(templateMemoKey{}).(*templateMemo)
	if memo == nil {
		return ts.Template(ctx, name, pin)
	}
	k := templateKey{name, pin}
	if got, ok := memo.m[k]; ok {
		return got.tpl, got.err
	}
	tpl, err := ts.Template(ctx, name, pin)
	if err == nil || errors.Is(err, notify.ErrNotFound) {
		memo.m[k] = templateRead{tpl, err}
	}
	return tpl, err
}
