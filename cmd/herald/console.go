package main

import (
	"net/http"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/console"
	"github.com/heraldhq/herald/internal/deadletter"
)

// consoleRefresh is how often the console's overview refreshes itself.
const consoleRefresh = 3 * time.Second

// withConsole serves the web console at /ui beside the API on the API's
// listener; every other path goes to the API as before.
func (a *app) withConsole(apiHandler http.Handler, hosts []string) (http.Handler, error) {
	channels, known, err := servedChannels(a.cfg)
	if err != nil {
		return nil, err
	}
	dep, err := a.newDeploymentReader()
	if err != nil {
		return nil, err
	}
	c, err := console.New(a.st, a.st, deadletter.New(a.st, a.tr.deadLetters), console.Config{
		Filters:       console.Filters{Notifications: api.ParseListFilter, Destinations: api.ParseDestinationFilter},
		Deployment:    dep,
		Token:         a.cfg.APIToken,
		Channels:      channels,
		KnownChannels: known,
		From:          a.cfg.SMTPFrom,
		Senders:       a.senderStates,
		Metrics:       a.reg,
		SessionTTL:    console.DefaultSessionTTL,
		RefreshEvery:  consoleRefresh,
		Logger:        a.log.With("component", "console"),
		Destinations:  a.st,
		Templates:     a.st,
		AllowedHosts:  hosts,
		Registerer:    a.reg,
		Recipients:    a.st,
		// As the API's: the page refuses the opt-outs PUT
		// /recipients/{user_id}/preferences refuses.
		RequiredCategories: commaList(a.cfg.RequiredCategories),
	})
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == console.Prefix || strings.HasPrefix(r.URL.Path, console.Prefix+"/") {
			c.ServeHTTP(w, r)
			return
		}
		apiHandler.ServeHTTP(w, r)
	}), nil
}

// senderStates is what the console shows of the senders: the state of the
// worker built in this process (herald serve), found among the readiness
// checks the parts registered, or none (herald api). The worker is built
// after the API, so it is looked up at each request, not when the console
// is built.
func (a *app) senderStates() ([]console.SenderState, bool) {
	var states []console.SenderState
	for _, ch := range a.checks {
		if sc, ok := ch.Pinger.(senderCheck); ok {
			st, ok := sc.w.ChannelState(sc.channel)
			if !ok {
				continue
			}
			states = append(states, console.SenderState{Channel: sc.channel, Up: st.Up, Reason: st.Reason, Class: st.Class,
				Until: st.Next, PausedDestinations: st.PausedDestinations})
		}
	}
	return states, len(states) > 0
}
