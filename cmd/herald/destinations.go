package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
)

func cmdDestinations(ctx context.Context, args []string, e env) error {
	return subcommands(ctx, args, e, "Usage: herald destinations list [--json]\n       herald destinations enable KEY\n\nRun 'herald destinations SUBCOMMAND --help' for its flags.",
		map[string]func(context.Context, []string, env) error{"list": cmdDestinationsList, "enable": cmdDestinationsEnable})
}

// destinationAdmin is what the destinations commands use: the store, or
// the API when --api-url is given.
type destinationAdmin interface {
	ListDestinations(ctx context.Context) ([]notify.Destination, error)
	EnableDestination(ctx context.Context, key string) error
}

// openDestinations opens the API client when cfg names an API, the
// migrated store otherwise, and its close func.
func openDestinations(ctx context.Context, cfg Config) (destinationAdmin, func(), error) {
	if cfg.APIURL != "" {
		c, err := newAPIClient(cfg)
		if err != nil {
			return nil, nil, err
		}
		return c, func() {}, nil
	}
	st, closeStore, err := openMigrated(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return st, closeStore, nil
}

func cmdDestinationsList(ctx context.Context, args []string, e env) error {
	var asJSON bool
	cfg, err := parseFlags("destinations list", "Lists the destinations that are not up (failing or disabled), by key, with their pending notifications. A destination not listed is up.",
		args, e, func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, `print them as GET /destinations answers: {"items": [{key, channel, state, reason, since, pending}, ...]}`)
		})
	if err != nil {
		return err
	}
	book, closeBook, err := openDestinations(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeBook()
	ds, err := book.ListDestinations(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, api.NewDestinationList(ds))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tCHANNEL\tSTATE\tSINCE\tPENDING\tREASON")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", d.Key, d.Channel, d.State, d.Since.UTC().Format(time.RFC3339), d.Pending, oneLine(d.Reason, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%d destination(s) not up\n", len(ds))
	return nil
}

func cmdDestinationsEnable(ctx context.Context, args []string, e env) error {
	var asJSON bool
	cfg, rest, err := parseConfig("destinations enable", "Enables a failing or disabled destination: herald destinations enable KEY (a webhook endpoint's scheme://host:port as listed, or email, telegram). Its record is removed and its deliveries go again; notifications already dead-lettered stay so (redrive them with herald dlq redrive).",
		args, e, func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, `print the reply of POST /destinations/{key}/enable: {"key", "state": "up"}`)
		})
	if err != nil {
		return err
	}
	if len(rest) != 1 || rest[0] == "" {
		return usageError{errors.New("destinations enable takes one destination key (run 'herald destinations list' to see them)")}
	}
	key := rest[0]
	book, closeBook, err := openDestinations(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeBook()
	if err := book.EnableDestination(ctx, key); err != nil {
		if errors.Is(err, notify.ErrNotFound) {
			return fmt.Errorf("destination %s has no failing or disabled record (it is up): %w", key, notify.ErrNotFound)
		}
		return err
	}
	if asJSON {
		return printJSON(e.stdout, api.NewEnabled(key))
	}
	fmt.Fprintf(e.stdout, "enabled %s: up\n", key)
	return nil
}

// ListDestinations lists the destinations through the API.
func (a apiClient) ListDestinations(ctx context.Context) ([]notify.Destination, error) {
	ds, err := a.c.Destinations(ctx)
	if err != nil {
		return nil, fmt.Errorf("list destinations: %w", err)
	}
	out := make([]notify.Destination, 0, len(ds))
	for _, d := range ds {
		out = append(out, notify.Destination{Key: d.Key, Channel: d.Channel, State: d.State, Reason: d.Reason, Since: d.Since.UTC(), Pending: d.Pending})
	}
	return out, nil
}

// EnableDestination enables a destination through the API; its 404 is
// notify.ErrNotFound, as the store reports it.
func (a apiClient) EnableDestination(ctx context.Context, key string) error {
	if err := a.c.EnableDestination(ctx, key); err != nil {
		return fmt.Errorf("enable destination %s: %w", key, fromAPIError(err))
	}
	return nil
}
