package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	apiclient "github.com/heraldhq/herald/client"
	"github.com/heraldhq/herald/internal/api"
	"github.com/heraldhq/herald/internal/notify"
)

func cmdDestinations(ctx context.Context, args []string, e env) error {
	return subcommands(ctx, args, e, "Usage: herald destinations list [--state S] [--limit N] [--cursor C] [--json]\n       herald destinations enable KEY\n\nRun 'herald destinations SUBCOMMAND --help' for its flags.",
		map[string]func(context.Context, []string, env) error{"list": cmdDestinationsList, "enable": cmdDestinationsEnable})
}

// destinationAdmin is what the destinations commands use: the store, or
// the API when --api-url is given.
type destinationAdmin interface {
	ListDestinations(ctx context.Context, f notify.DestinationFilter) (notify.DestinationPage, error)
	EnableDestination(ctx context.Context, key string) error
}

func cmdDestinationsList(ctx context.Context, args []string, e env) error {
	var (
		asJSON        bool
		state, cursor string
		limit         int
	)
	cfg, err := parseFlags("destinations list", "Lists the destinations that are not up (failing or disabled), by key, with why, since when and their pending notifications, a page at a time as GET /destinations does. A destination not listed is up. The next page's cursor is printed on stderr (in the JSON with --json).",
		args, e, func(fs *flag.FlagSet) {
			fs.StringVar(&state, "state", "", "only the destinations in this state: failing or disabled")
			fs.IntVar(&limit, "limit", api.DefaultListLimit, "page size, from 1 to "+strconv.Itoa(api.MaxListLimit))
			fs.StringVar(&cursor, "cursor", "", "resume where the previous page ended (its next cursor, same state)")
			fs.BoolVar(&asJSON, "json", false, `print the page as GET /destinations answers it: {"items": [{key, channel, state, reason, since, pending}, ...], "next_cursor": "..."}`)
		})
	if err != nil {
		return err
	}
	f, err := api.ParseDestinationFilter(listQuery(limit, map[string]string{"state": state, "cursor": cursor}))
	if err != nil {
		return paramFlagError("destinations list", "", err)
	}
	book, closeBook, err := openAPIOrDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeBook()
	page, err := book.ListDestinations(ctx, f)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, api.NewDestinationList(f, page))
	}
	ds := page.Items
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tCHANNEL\tSTATE\tSINCE\tPENDING\tREASON")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", d.Key, d.Channel, d.State, d.Since.UTC().Format(time.RFC3339), d.Pending, oneLine(d.Reason, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case page.Next != "":
		fmt.Fprintf(e.stderr, "%d destination(s) not up on this page; next page: --cursor %s\n", len(ds), f.EncodeCursor(page.Next))
	case f.After != "":
		fmt.Fprintf(e.stderr, "%d destination(s) not up on this page; no more pages\n", len(ds))
	default:
		fmt.Fprintf(e.stderr, "%d destination(s) not up\n", len(ds))
	}
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
	book, closeBook, err := openAPIOrDatabase(ctx, cfg)
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

// ListDestinations asks for the page of destinations f selects; the
// cursors are the API's, which the filter encodes and decodes as the
// database path does.
func (a apiClient) ListDestinations(ctx context.Context, f notify.DestinationFilter) (notify.DestinationPage, error) {
	opts := apiclient.DestinationOptions{State: f.State, Limit: f.Limit}
	if f.After != "" {
		opts.Cursor = f.EncodeCursor(f.After)
	}
	p, err := a.c.DestinationPage(ctx, opts)
	if err != nil {
		return notify.DestinationPage{}, fmt.Errorf("list destinations: %w", err)
	}
	out := notify.DestinationPage{Items: make([]notify.Destination, 0, len(p.Items))}
	for _, d := range p.Items {
		out.Items = append(out.Items, notify.Destination{Key: d.Key, Channel: d.Channel, State: d.State, Reason: d.Reason, Since: d.Since.UTC(), Pending: d.Pending})
	}
	if p.NextCursor != "" {
		if out.Next, err = f.DecodeCursor(p.NextCursor); err != nil {
			return notify.DestinationPage{}, fmt.Errorf("the API's next cursor: %w", err)
		}
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
