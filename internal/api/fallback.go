package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/heraldhq/herald/internal/notify"
)

// resolveChannels is resolve for a create with a fallback list
// (channels, issue 35 point 5): each channel is resolved as a create on
// it would be (its address from the recipient, its content from the
// template's variant for it). A channel the recipient has no address for
// is left out, and so is one the recipient has opted out of for the
// create's category (read now; the store checks the first again in the
// create's transaction, and each later hop when it is made). The first
// left becomes the notification; the others are its hops
// (NewNotification.Fallback), made one by one as the one before is
// dead-lettered. When every channel with an address is opted out of, the
// first of them is the notification, which the store writes suppressed.
// The recipient and the template are read once for all the channels
// (withRecipientMemo, withTemplateMemo): every channel is resolved from
// the same revision of the recipient, which the store checks at the
// write.
func (a *API) resolveChannels(ctx context.Context, nn *notify.NewNotification, req notify.CreateRequest) (*apiError, int) {
	ctx = withRecipientMemo(withTemplateMemo(ctx))
	var hops []notify.NewNotification
	var missing []string
	for i, ch := range req.Channels {
		hr := req
		hr.Channel, hr.Channels = ch, nil
		hn := *nn
		e, status := a.resolve(ctx, &hn, hr)
		if e != nil {
			if status == http.StatusUnprocessableEntity && e.Field == "to" {
				missing = append(missing, ch)
				continue
			}
			if e.Field == "user_id" || status == http.StatusServiceUnavailable {
				return e, status
			}
			e.Message = fmt.Sprintf("channels[%d] (%s): %s", i, ch, e.Message)
			return e, status
		}
		hops = append(hops, hn)
	}
	if len(hops) == 0 {
		return unprocessable("channels", fmt.Sprintf("recipient %q has no address for any of channels %s",
			req.UserID, strings.Join(missing, ", "))), http.StatusUnprocessableEntity
	}
	if req.Category != "" && a.cfg.Preferences != nil && !a.requiredCategory(req.Category) {
		prefs, err := a.cfg.Preferences.Preferences(ctx, req.UserID)
		if err != nil {
			return &apiError{Message: err.Error()}, http.StatusServiceUnavailable
		}
		allowed := hops[:0:0]
		for _, h := range hops {
			if on, set := prefs[req.Category][h.Request.Channel]; !set || on {
				allowed = append(allowed, h)
			}
		}
		if len(allowed) > 0 {
			hops = allowed
		} else {
			hops = hops[:1]
		}
	}
	first := hops[0]
	for _, h := range hops[1:] {
		first.Fallback = append(first.Fallback, notify.HopOf(h))
	}
	first.Digest = requestDigest(req)
	*nn = first
	return nil, 0
}

// recipientMemo holds the one recipient a create read (see
// withRecipientMemo).
type recipientMemo struct {
	read bool
	rec  notify.Recipient
	err  error
}

type recipientMemoKey struct{}

// withRecipientMemo returns ctx with an empty memo of the recipient read:
// a create resolved for several channels reads its user's recipient once.
func withRecipientMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, recipientMemoKey{}, &recipientMemo{})
}

// readRecipient reads userID's recipient from rs, or from the memo
// (withRecipientMemo) when it was read before. A store failure is not
// remembered.
func readRecipient(ctx context.Context, rs Recipients, userID string) (notify.Recipient, error) {
	memo, _ := ctx.Value(recipientMemoKey{}).(*recipientMemo)
	if memo == nil {
		return rs.Recipient(ctx, userID)
	}
	if memo.read {
		return memo.rec, memo.err
	}
	rec, err := rs.Recipient(ctx, userID)
	if err == nil || errors.Is(err, notify.ErrNotFound) {
		memo.read, memo.rec, memo.err = true, rec, err
	}
	return rec, err
}
