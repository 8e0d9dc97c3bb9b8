package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ensureTopics creates whichever of the named topics is missing, with the
// configured partitions and replication factor, and returns the ones it
// created. Every process calls it at start, so start order does not matter;
// a topic that exists is left as it is.
func ensureTopics(ctx context.Context, adm *kadm.Client, cfg Config, names []string) ([]string, error) {
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", authHint(cfg, err))
	}
	var missing []string
	for _, name := range names {
		d, ok := details[name]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, name)
			continue
		}
		if d.Err != nil {
			return nil, fmt.Errorf("describe topic %q: %w", name, d.Err)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	rf := cfg.ReplicationFactor
	if rf == 0 {
		meta, err := adm.BrokerMetadata(ctx)
		if err != nil {
			return nil, fmt.Errorf("count brokers: %w", err)
		}
		rf = int16(min(3, max(1, len(meta.Brokers))))
	}
	resps, err := adm.CreateTopics(ctx, cfg.Partitions, rf, nil, missing...)
	if err != nil {
		return nil, fmt.Errorf("create topics: %w", err)
	}
	var created []string
	for _, name := range missing {
		r := resps[name]
		switch {
		case r.Err == nil:
			created = append(created, name)
		case errors.Is(r.Err, kerr.TopicAlreadyExists):
			// Another process created it meanwhile.
		default:
			return created, fmt.Errorf("create topic %q (%d partitions, replication factor %d): %w %s",
				name, cfg.Partitions, rf, r.Err, r.ErrMessage)
		}
	}
	return created, nil
}

// openAdmin is how an operation of its own begins (EnsureTopics, Delete):
// it fills cfg's defaults and checks them, then opens an admin client. It
// returns cfg as filled; the returned func closes the client.
func openAdmin(cfg Config) (Config, *kadm.Client, func(), error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return cfg, nil, nil, err
	}
	adm, closeAdm, err := newAdmin(cfg)
	return cfg, adm, closeAdm, err
}

// newAdmin returns an admin client on its own kgo client, closed by the
// returned func.
func newAdmin(cfg Config) (*kadm.Client, func(), error) {
	cl, err := kgo.NewClient(cfg.ConnOpts()...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	return kadm.NewClient(cl), cl.Close, nil
}

// logRecreated reports topics that had to be created after start: somebody
// deleted them, and with them whatever records they held.
func logRecreated(log *slog.Logger, created []string) {
	for _, name := range created {
		log.Error("kafka topic was missing (deleted while herald ran?); recreated it. Records it held are gone; "+
			"their notifications stay pending in the database and get fresh events after HERALD_RECONCILE_AFTER",
			"topic", name)
	}
}

// EnsureTopics creates the configuration's topics (the status topic too)
// when missing. Publishers
// and Consumers do it themselves; tests and operators may call it ahead.
func EnsureTopics(ctx context.Context, cfg Config) error {
	cfg, adm, closeAdm, err := openAdmin(cfg)
	if err != nil {
		return err
	}
	defer closeAdm()
	_, err = ensureTopics(ctx, adm, cfg, cfg.Topics().all())
	return err
}

// Delete removes the configuration's topics, records included, and its
// consumer group. Missing ones are not an error. Tests and herald bench
// clean up with it.
func Delete(ctx context.Context, cfg Config) error {
	cfg, adm, closeAdm, err := openAdmin(cfg)
	if err != nil {
		return err
	}
	defer closeAdm()
	t := cfg.Topics()
	var errs []error
	groups, err := adm.DeleteGroups(ctx, t.Group)
	if err != nil {
		errs = append(errs, fmt.Errorf("delete group %q: %w", t.Group, err))
	}
	for _, g := range groups {
		if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
			errs = append(errs, fmt.Errorf("delete group %q: %w", g.Group, g.Err))
		}
	}
	resps, err := adm.DeleteTopics(ctx, t.all()...)
	if err != nil {
		errs = append(errs, fmt.Errorf("delete topics: %w", err))
	}
	for _, r := range resps {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("delete topic %q: %w", r.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}
