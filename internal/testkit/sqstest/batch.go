package sqstest

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// batchShim makes goaws's SendMessageBatch whole. goaws v0.4.5 reads only
// Id, MessageBody, MessageGroupId and MessageDeduplicationId of a batch
// entry: it drops every message attribute and DelaySeconds. The shim turns
// each entry into the SendMessage goaws implements fully (the entry's
// parameters are SendMessage's, under the entry's prefix) and answers with
// the batch response SQS would give: one result or one error per entry. It
// also refuses the entries s.refuse names, for tests of partial failures.
func (s *Server) batchShim(next http.Handler) http.Handler {
	return shim("SendMessageBatch", next, func(w http.ResponseWriter, r *http.Request) {
		entries := map[int]url.Values{}
		for k, v := range r.Form {
			rest, ok := strings.CutPrefix(k, "SendMessageBatchRequestEntry.")
			if !ok {
				continue
			}
			n, param, ok := strings.Cut(rest, ".")
			i, err := strconv.Atoi(n)
			if !ok || err != nil {
				http.Error(w, "bad batch entry "+k, http.StatusBadRequest)
				return
			}
			if entries[i] == nil {
				entries[i] = url.Values{}
			}
			entries[i][param] = v
		}
		if len(entries) == 0 || len(entries) > 10 {
			next.ServeHTTP(w, r) // goaws's own errors for these
			return
		}
		order := make([]int, 0, len(entries))
		for i := range entries {
			order = append(order, i)
		}
		sort.Ints(order)
		var res batchResponse
		res.Xmlns = "http://queue.amazonaws.com/doc/2012-11-05/"
		res.RequestID = "00000000-0000-0000-0000-000000000002"
		for _, i := range order {
			e := entries[i]
			id := e.Get("Id")
			if s.refused(e.Get("MessageBody")) {
				res.Result.Errors = append(res.Result.Errors, batchError{ID: id, Code: "InternalError", Message: "refused by the test server", SenderFault: false})
				continue
			}
			form := url.Values{}
			for k, v := range e {
				if k != "Id" {
					form[k] = v
				}
			}
			form.Set("Action", "SendMessage")
			form.Set("QueueUrl", r.Form.Get("QueueUrl"))
			form.Set("Version", r.Form.Get("Version"))
			req := httptest.NewRequestWithContext(r.Context(), http.MethodPost, r.URL.String(), strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				var er struct {
					Error struct {
						Code    string `xml:"Code"`
						Message string `xml:"Message"`
					} `xml:"Error"`
				}
				_ = xml.Unmarshal(rec.Body.Bytes(), &er)
				if rec.Code == http.StatusBadRequest && er.Error.Code == "AWS.SimpleQueueService.NonExistentQueue" {
					// The whole request fails, as SQS's does.
					w.WriteHeader(rec.Code)
					_, _ = w.Write(rec.Body.Bytes())
					return
				}
				res.Result.Errors = append(res.Result.Errors, batchError{ID: id, Code: er.Error.Code, Message: er.Error.Message, SenderFault: rec.Code < 500})
				continue
			}
			var ok struct {
				Result struct {
					MessageID         string `xml:"MessageId"`
					MD5OfMessageBody  string `xml:"MD5OfMessageBody"`
					MD5OfMessageAttrs string `xml:"MD5OfMessageAttributes"`
					SequenceNumber    string `xml:"SequenceNumber"`
				} `xml:"SendMessageResult"`
			}
			if err := xml.Unmarshal(rec.Body.Bytes(), &ok); err != nil {
				http.Error(w, fmt.Sprintf("goaws answered SendMessage with %q", rec.Body.String()), http.StatusInternalServerError)
				return
			}
			res.Result.Entries = append(res.Result.Entries, batchEntry{
				ID: id, MessageID: ok.Result.MessageID, MD5OfMessageBody: ok.Result.MD5OfMessageBody,
				MD5OfMessageAttributes: ok.Result.MD5OfMessageAttrs, SequenceNumber: ok.Result.SequenceNumber,
			})
		}
		w.Header().Set("Content-Type", "application/xml")
		_ = xml.NewEncoder(w).Encode(res)
	})
}

type batchResponse struct {
	XMLName   xml.Name `xml:"SendMessageBatchResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	Result    batchResult
	RequestID string `xml:"ResponseMetadata>RequestId"`
}

type batchResult struct {
	XMLName xml.Name     `xml:"SendMessageBatchResult"`
	Entries []batchEntry `xml:"SendMessageBatchResultEntry"`
	Errors  []batchError `xml:"BatchResultErrorEntry"`
}

type batchEntry struct {
	ID                     string `xml:"Id"`
	MessageID              string `xml:"MessageId"`
	MD5OfMessageBody       string `xml:"MD5OfMessageBody"`
	MD5OfMessageAttributes string `xml:"MD5OfMessageAttributes,omitempty"`
	SequenceNumber         string `xml:"SequenceNumber,omitempty"`
}

type batchError struct {
	ID          string `xml:"Id"`
	Code        string `xml:"Code"`
	Message     string `xml:"Message"`
	SenderFault bool   `xml:"SenderFault"`
}

// RefuseBatchEntries makes SendMessageBatch refuse (as an entry error, the
// others stored) every entry whose body contains substr, until it is
// called again with "".
func (s *Server) RefuseBatchEntries(substr string) {
	s.mu.Lock()
	s.refuse = substr
	s.mu.Unlock()
}

func (s *Server) refused(body string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refuse != "" && strings.Contains(body, s.refuse)
}
