package main

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"github.com/heraldhq/herald/internal/deployment"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/transport/nats"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
	"github.com/heraldhq/herald/internal/transport/table"
)

// Every long-running process reports itself to the store (see package
// deployment); the API's process reads the reports with the pending
// notifications and the broker's queue depths, for the console's overview
// and GET /status.
const (
	// reportEvery is how often a process writes its report, and
	// reportCheck how often it reads its senders' states to write a change
	// at once.
	reportEvery = deployment.DefaultEvery
	reportCheck = time.Second
	// queueCache is how long the API reuses the broker's answer, and
	// queueTimeout how long it waits for one.
	queueCache   = 2 * time.Second
	queueTimeout = 3 * time.Second
)

// queueDepths are the transports that can tell their queues' depths, by
// name; a transport not listed cannot (Kafka: the consumer group's lag
// needs the group's committed offsets and every partition's end, left for
// later).
var queueDepths = map[string]func(a *app) deployment.Queues{
	"table": func(a *app) deployment.Queues { return table.Depth{Stats: a.st} },
	"rabbitmq": func(a *app) deployment.Queues {
		return rabbitmq.Depth{Config: rabbitConfig(a.cfg, a.log, a.hooks.prefix, "status")}
	},
	"nats": func(a *app) deployment.Queues {
		return nats.Depth{Config: natsConfig(a.cfg, a.log, a.hooks.prefix, "status")}
	},
}

// newDeploymentReader reads the whole deployment's state for the console
// and GET /status.
func (a *app) newDeploymentReader() (*deployment.Reader, error) {
	var qs deployment.Queues
	if f, ok := queueDepths[a.tr.name]; ok {
		qs = f(a)
	}
	return deployment.NewReader(a.st, deployment.ReaderConfig{
		Transport:    a.tr.name,
		Queues:       qs,
		LiveWithin:   deployment.LiveWithin(reportEvery),
		QueueCache:   queueCache,
		QueueTimeout: queueTimeout,
		Logger:       a.log.With("component", "status"),
	})
}

// reporterPart is the part that reports this process (its roles, and a
// worker's senders) to the store until the process stops.
func (a *app) reporterPart(roles []role) (func(context.Context) error, error) {
	host, _ := os.Hostname()
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	var senders func() []notify.SenderReport
	if hasRole(roles, roleWorker) {
		senders = a.senderReports
	}
	r, err := deployment.NewReporter(a.st, deployment.ReporterConfig{
		Host: host, PID: os.Getpid(), Roles: names, Version: processVersion(),
		Senders: senders,
		Every:   reportEvery,
		Check:   reportCheck,
		Forget:  deployment.DefaultForget,
		Logger:  a.log.With("component", "report"),
	})
	if err != nil {
		return nil, err
	}
	return r.Run, nil
}

// senderReports reads the state of the worker's senders built in this
// process, as the console's senderStates does.
func (a *app) senderReports() []notify.SenderReport {
	var out []notify.SenderReport
	for _, ch := range a.checks {
		sc, ok := ch.Pinger.(senderCheck)
		if !ok {
			continue
		}
		st, ok := sc.w.ChannelState(sc.channel)
		if !ok {
			continue
		}
		r := notify.SenderReport{Channel: sc.channel, Up: st.Up, PausedDestinations: st.PausedDestinations}
		if !st.Up {
			r.Class, r.Reason, r.Since = st.Class, st.Reason, st.Since
			if !st.Next.IsZero() {
				until := st.Next.UTC()
				r.Until = &until
			}
		}
		out = append(out, r)
	}
	return out
}

// processVersion is the version a report names, as herald version
// prints it.
func processVersion() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "" {
		v = bi.Main.Version
	}
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	return v
}
