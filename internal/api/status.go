package api

import (
	"context"
	"net/http"

	"github.com/heraldhq/herald/internal/notify"
)

// Status reads the state of the whole deployment for GET /status.
// internal/deployment's Reader implements it.
type Status interface {
	Read(ctx context.Context) (notify.Deployment, error)
}

// statusView is the reply of GET /status.
type statusView struct {
	At            string              `json:"at"`
	Notifications statusNotifications `json:"notifications"`
	Outbox        statusOutbox        `json:"outbox"`
	Transport     string              `json:"transport"`
	// Queues is null when the transport cannot tell its queues' depths.
	Queues      *[]statusQueue  `json:"queues"`
	QueuesError *string         `json:"queues_error"`
	Processes   []statusProcess `json:"processes"`
}

type statusNotifications struct {
	Pending       int64   `json:"pending"`
	PendingCapped bool    `json:"pending_capped"`
	OldestPending float64 `json:"oldest_pending_seconds"`
	Failed        int64   `json:"failed"`
}

type statusOutbox struct {
	Unprocessed   int64   `json:"unprocessed"`
	OldestSeconds float64 `json:"oldest_seconds"`
}

type statusQueue struct {
	Name      string `json:"name"`
	Role      string `json:"role"`
	Ready     int64  `json:"ready"`
	InFlight  *int64 `json:"in_flight"`
	Delayed   *int64 `json:"delayed"`
	Consumers *int   `json:"consumers"`
}

type statusProcess struct {
	ID             string         `json:"id"`
	Host           string         `json:"host"`
	PID            int            `json:"pid"`
	Roles          []string       `json:"roles"`
	Version        string         `json:"version"`
	State          string         `json:"state"`
	StartedAt      string         `json:"started_at"`
	SeenAt         string         `json:"seen_at"`
	SeenSecondsAgo float64        `json:"seen_seconds_ago"`
	Senders        []statusSender `json:"senders"`
}

type statusSender struct {
	Channel            string  `json:"channel"`
	State              string  `json:"state"`
	Reason             string  `json:"reason"`
	Since              string  `json:"since"`
	Until              *string `json:"until"`
	PausedDestinations int     `json:"paused_destinations"`
}

// The states of a process in GET /status.
const (
	ProcessLive = "live"
	ProcessGone = "gone"
)

// NewStatus is the JSON shape of the deployment's state, shared by GET
// /status and `herald status --json`.
func NewStatus(d notify.Deployment) any {
	v := statusView{
		At: formatTime(d.At),
		Notifications: statusNotifications{Pending: d.Pending.Pending, PendingCapped: d.Pending.Capped,
			OldestPending: d.Pending.OldestAge.Seconds(), Failed: d.Outbox.DeadLetters},
		Outbox:    statusOutbox{Unprocessed: d.Outbox.Unprocessed, OldestSeconds: d.Outbox.OldestAge.Seconds()},
		Transport: d.Transport,
		Processes: []statusProcess{},
	}
	if d.QueuesKnown {
		qs := []statusQueue{}
		for _, q := range d.Queues {
			qs = append(qs, statusQueue{Name: q.Name, Role: q.Role, Ready: q.Ready, InFlight: q.InFlight, Delayed: q.Delayed, Consumers: q.Consumers})
		}
		v.Queues = &qs
		v.QueuesError = nullIfEmpty(d.QueueError)
	}
	for _, p := range d.Processes {
		sp := statusProcess{ID: p.ID, Host: p.Host, PID: p.PID, Roles: p.Roles, Version: p.Version, State: ProcessGone,
			StartedAt: formatTime(p.StartedAt), SeenAt: formatTime(p.SeenAt), SeenSecondsAgo: p.Age.Seconds(), Senders: []statusSender{}}
		if sp.Roles == nil {
			sp.Roles = []string{}
		}
		if p.Live {
			sp.State = ProcessLive
		}
		for _, s := range p.Senders {
			ss := statusSender{Channel: s.Channel, State: "up", Reason: s.Reason, Since: formatTime(s.Since), Until: formatTimePtr(s.Until),
				PausedDestinations: s.PausedDestinations}
			if !s.Up {
				ss.State = s.Class
				if ss.State == "" {
					ss.State = "down"
				}
			}
			sp.Senders = append(sp.Senders, ss)
		}
		v.Processes = append(v.Processes, sp)
	}
	return v
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	d, err := a.cfg.Status.Read(r.Context())
	if err != nil {
		a.unavailable(w, r, "read status", err)
		return
	}
	writeJSON(w, http.StatusOK, NewStatus(d))
}
