// Command ferretdb runs FerretDB v1 (github.com/FerretDB/FerretDB, the
// module's ferretdb package) as a process of its own, over PostgreSQL, for
// the chaos harness's mongodb run: the harness kills it with SIGKILL and
// starts it again on the same data. FerretDB's own cmd/ferretdb needs
// modules herald does not otherwise use (its CLI parser, debug handlers);
// this wrapper builds from the packages herald already depends on.
//
//	ferretdb --listen 127.0.0.1:PORT --postgresql-url postgres://.../DB
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferretdb:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ferretdb", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:27017", "TCP address to listen on")
	pgURL := fs.String("postgresql-url", "", "PostgreSQL database FerretDB keeps its data in (required)")
	verbose := fs.Bool("verbose", false, "log FerretDB's warnings (every failed command, duplicate keys included)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pgURL == "" {
		return errors.New("--postgresql-url is required")
	}
	var logOut io.Writer = io.Discard
	if *verbose {
		logOut = stdout
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:      ferretdb.ListenerConfig{TCP: *listen},
		Handler:       "postgresql",
		PostgreSQLURL: *pgURL,
		Logger:        slog.New(slog.NewTextHandler(logOut, nil)),
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ferretdb: serving %s on %s\n", f.MongoDBURI(), *listen)
	if err := f.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
