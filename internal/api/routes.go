package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// openAPIDocument is the OpenAPI 3.1 description of the API, served at GET
// /openapi.json. It is the one list of the routes: New registers each of
// its operations on the handler of the same operationId, and the operations
// it marks "security: []" need no token. A handler without an operation, or
// an operation without a handler, fails New (and the tests).
//
//go:embed openapi.json
var openAPIDocument []byte

// operation is one method on one path of the document.
type operation struct {
	method, path, id string
	// open is true for an operation that needs no token (probes,
	// scrapers and the document itself).
	open bool
}

// pattern is the operation's ServeMux pattern, also its route label.
func (o operation) pattern() string { return o.method + " " + o.path }

// operations are the document's operations, in path then method order.
var operations = mustOperations(openAPIDocument)

func mustOperations(doc []byte) []operation {
	ops, err := parseOperations(doc)
	if err != nil {
		panic("api: openapi.json: " + err.Error())
	}
	return ops
}

// parseOperations reads the operations of an OpenAPI document: its paths,
// their methods, operation ids and whether each needs the token.
func parseOperations(doc []byte) ([]operation, error) {
	type op struct {
		OperationID string             `json:"operationId"`
		Security    *[]json.RawMessage `json:"security"`
	}
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	var ops []operation
	seen := map[string]bool{}
	for path, item := range d.Paths {
		for key, raw := range item {
			method := strings.ToUpper(key)
			if !slices.Contains(probeMethods, method) {
				continue // parameters, summary, ...
			}
			var o op
			if err := json.Unmarshal(raw, &o); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			if o.OperationID == "" || seen[o.OperationID] {
				return nil, fmt.Errorf("%s %s: operationId %q is missing or used twice", method, path, o.OperationID)
			}
			seen[o.OperationID] = true
			ops = append(ops, operation{method: method, path: path, id: o.OperationID, open: o.Security != nil && len(*o.Security) == 0})
		}
	}
	slices.SortFunc(ops, func(a, b operation) int { return strings.Compare(a.path+" "+a.method, b.path+" "+b.method) })
	return ops, nil
}

// optionalOperations are served only when configured (Config.Metrics,
// Config.DeadLetters, Config.Destinations, Config.Recipients,
// Config.Templates); every other operation is
// always served.
var optionalOperations = map[string]bool{"metrics": true, "listDeadLetters": true, "redriveDeadLetters": true,
	"listDestinations": true, "enableDestination": true, "getStatus": true,
	"putRecipient": true, "getRecipient": true, "deleteRecipient": true,
	"putTemplate": true, "getTemplate": true, "listTemplates": true, "previewTemplate": true,
	"getPreferences": true, "putPreferences": true, "createPreferenceLink": true, "showUnsubscribe": true, "unsubscribe": true}

// register serves every operation of the document on its handler.
func (a *API) register() error {
	handlers := map[string]http.Handler{
		"createNotification": http.HandlerFunc(a.create),
		"createBatch":        http.HandlerFunc(a.createBatch),
		"listNotifications":  http.HandlerFunc(a.list),
		"getNotification":    http.HandlerFunc(a.get),
		"cancelNotification": http.HandlerFunc(a.cancel),
		"listAttempts":       http.HandlerFunc(a.attempts),
		"healthz":            http.HandlerFunc(a.healthz),
		"readyz":             http.HandlerFunc(a.readyz),
		"openapi":            http.HandlerFunc(serveDocument),
	}
	if a.cfg.Metrics != nil {
		handlers["metrics"] = a.cfg.Metrics
	}
	if a.cfg.DeadLetters != nil {
		handlers["listDeadLetters"] = http.HandlerFunc(a.listDeadLetters)
		handlers["redriveDeadLetters"] = http.HandlerFunc(a.redrive)
	}
	if a.cfg.Status != nil {
		handlers["getStatus"] = http.HandlerFunc(a.status)
	}
	if a.cfg.Destinations != nil {
		handlers["listDestinations"] = http.HandlerFunc(a.listDestinations)
		handlers["enableDestination"] = http.HandlerFunc(a.enableDestination)
	}
	if a.cfg.Recipients != nil {
		handlers["putRecipient"] = http.HandlerFunc(a.putRecipient)
		handlers["getRecipient"] = http.HandlerFunc(a.getRecipient)
		handlers["deleteRecipient"] = http.HandlerFunc(a.deleteRecipient)
	}
	if a.cfg.Templates != nil {
		handlers["putTemplate"] = http.HandlerFunc(a.putTemplate)
		handlers["getTemplate"] = http.HandlerFunc(a.getTemplate)
		handlers["listTemplates"] = http.HandlerFunc(a.listTemplates)
		handlers["previewTemplate"] = http.HandlerFunc(a.previewTemplate)
	}
	if a.cfg.Preferences != nil {
		handlers["getPreferences"] = http.HandlerFunc(a.getPreferences)
		handlers["putPreferences"] = http.HandlerFunc(a.putPreferences)
		handlers["createPreferenceLink"] = http.HandlerFunc(a.createPreferenceLink)
		handlers["showUnsubscribe"] = http.HandlerFunc(a.showUnsubscribe)
		handlers["unsubscribe"] = http.HandlerFunc(a.unsubscribe)
	}
	for _, op := range operations {
		h, ok := handlers[op.id]
		if !ok {
			if optionalOperations[op.id] {
				continue
			}
			return fmt.Errorf("operation %s (%s) has no handler", op.id, op.pattern())
		}
		delete(handlers, op.id)
		a.mux.Handle(op.pattern(), h)
		a.routes[op.pattern()] = true
		if op.open {
			a.open[op.path] = true
		}
		if prefix, _, wild := strings.Cut(op.path, "{"); op.open && wild {
			// One wildcard, the last segment (/unsubscribe/{token}).
			a.openPrefixes = append(a.openPrefixes, prefix)
		}
	}
	for id := range handlers {
		return fmt.Errorf("handler %s has no operation in openapi.json", id)
	}
	return nil
}

// isOpen reports whether path is an operation's that needs no token: a
// path of the document, or one segment under the prefix of an open
// operation whose last segment is a wildcard.
func (a *API) isOpen(path string) bool {
	if a.open[path] {
		return true
	}
	for _, p := range a.openPrefixes {
		if rest, ok := strings.CutPrefix(path, p); ok && rest != "" && !strings.Contains(rest, "/") {
			return true
		}
	}
	return false
}

// serveDocument handles GET /openapi.json.
func serveDocument(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPIDocument)
}
