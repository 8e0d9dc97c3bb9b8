package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Deployment reads the state of the whole deployment: the notifications
// pending, the broker's queues and the reports of every herald process.
// internal/deployment's Reader implements it.
type Deployment interface {
	Read(ctx context.Context) (notify.Deployment, error)
}

// deploymentView is the overview's part about the whole deployment.
type deploymentView struct {
	Pending       int64
	PendingCapped bool
	// OldestPending is the oldest pending notification's age, "" when none.
	OldestPending string
	Transport     string
	QueuesKnown   bool
	Queues        []queueView
	QueueError    string
	Processes     []processView
	LiveWorkers   int
	// Warnings say in words why nothing is delivered, when the figures
	// show it.
	Warnings []string
}

type queueView struct {
	Name, Role string
	Ready      int64
	InFlight   string // "" when the broker cannot tell
	Consumers  string
	Delayed    string
}

type processView struct {
	ID, Where, Roles, Version string
	Live                      bool
	Seen                      string
	StartedAt                 time.Time
	IsWorker                  bool
	Senders                   []notify.SenderReport
}

// ageText is an age as the overview shows it: whole seconds.
func ageText(d time.Duration) string { return max(d, 0).Round(time.Second).String() }

func optText[T int | int64](v *T) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(*v)
}

func newDeploymentView(d notify.Deployment) *deploymentView {
	v := &deploymentView{Pending: d.Pending.Pending, PendingCapped: d.Pending.Capped, Transport: d.Transport,
		QueuesKnown: d.QueuesKnown, QueueError: d.QueueError}
	if d.Pending.Pending > 0 {
		v.OldestPending = ageText(d.Pending.OldestAge)
	}
	var sendReady int64
	sendConsumers := -1
	for _, q := range d.Queues {
		v.Queues = append(v.Queues, queueView{Name: q.Name, Role: q.Role, Ready: q.Ready, InFlight: optText(q.InFlight),
			Consumers: optText(q.Consumers), Delayed: optText(q.Delayed)})
		if q.Role == notify.QueueSend {
			sendReady += q.Ready
			if q.Consumers != nil {
				sendConsumers = max(sendConsumers, 0) + *q.Consumers
			}
		}
	}
	liveRelays := 0
	for _, p := range d.Processes {
		pv := processView{ID: p.ID, Where: fmt.Sprintf("%s (pid %d)", p.Host, p.PID), Roles: strings.Join(p.Roles, ", "),
			Version: p.Version, Live: p.Live, Seen: ageText(p.Age) + " ago", StartedAt: p.StartedAt,
			IsWorker: p.HasRole("worker"), Senders: p.Senders}
		v.Processes = append(v.Processes, pv)
		if p.Live && pv.IsWorker {
			v.LiveWorkers++
		}
		if p.Live && p.HasRole("relay") {
			liveRelays++
		}
	}
	switch {
	case v.Pending > 0 && v.LiveWorkers == 0:
		v.Warnings = append(v.Warnings, fmt.Sprintf("Nothing is being delivered: %s pending and no worker has reported in. Start herald worker (or herald serve).", pendingText(v)))
	case sendReady > 0 && sendConsumers == 0:
		v.Warnings = append(v.Warnings, fmt.Sprintf("The send queue holds %d messages and no consumer is attached: the workers report in, but none consumes.", sendReady))
	}
	if d.Transport != "table" && d.Outbox.Unprocessed > d.Outbox.UnprocessedStatus && liveRelays == 0 {
		v.Warnings = append(v.Warnings, fmt.Sprintf("%d outbox rows wait for a relay and none has reported in. Start herald relay.",
			d.Outbox.Unprocessed-d.Outbox.UnprocessedStatus))
	}
	return v
}

func pendingText(v *deploymentView) string {
	if v.PendingCapped {
		return fmt.Sprintf("more than %d notifications", v.Pending)
	}
	if v.Pending == 1 {
		return "1 notification"
	}
	return fmt.Sprintf("%d notifications", v.Pending)
}
