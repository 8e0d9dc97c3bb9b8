package api

import (
	"context"
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
// Every channel is resolved from the same revision of the recipient: a
// change between the reads answers notify.ErrRecipientChanged's 409
// through the create's retries (errRecipientMoved).
func (a *API) resolveChannels(ctx context.Context, nn *notify.NewNotification, req notify.CreateRequest) (*apiError, int) {
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
		if len(hops) > 0 && hn.RecipientRevision != hops[0].RecipientRevision {
			return &apiError{Code: "recipient_changed"}, http.StatusConflict
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
