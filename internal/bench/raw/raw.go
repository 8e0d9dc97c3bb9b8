// Package raw measures what herald's dependencies can do without herald: the
// bare create transaction on PostgreSQL and SQLite, the store's own pipeline
// and multi-row insert, and bare POSTs to a receiver. herald bench divides
// its own rates by these to show how much of the ceiling herald reaches.
// The brokers' raw publish ceilings are in package publish, which each
// transport's row names.
//
// It also makes the scratch databases herald bench works in, so that a bench
// never touches a user's data. Everything here runs against scratch objects:
// tables prefixed bench_raw_ in a scratch database or file.
package raw

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

// cleanupTimeout bounds dropping scratch objects, which runs even after the
// bench's context ended (an interrupted bench still cleans up).
const cleanupTimeout = 30 * time.Second

// Suffix returns a short random name part for scratch names.
func Suffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ScratchPostgres creates an empty database named herald_bench_<random> on the
// server of serverURL and returns its URL and a func that drops it (closing
// any connection still open to it). serverURL's own database is only used to
// run CREATE DATABASE and DROP DATABASE; nothing is written in it. The role
// needs the CREATEDB privilege.
func ScratchPostgres(ctx context.Context, serverURL string) (string, func() error, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		// url.Parse quotes the URL, which may hold a password.
		return "", nil, fmt.Errorf("scratch database: cannot parse the database URL")
	}
	name := "herald_bench_" + Suffix()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("scratch database: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("scratch database: create %s (the role needs CREATEDB): %w", name, err)
	}
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return fmt.Errorf("drop scratch database %s: connect: %w", name, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop scratch database %s: %w", name, err)
		}
		return nil
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

// IsScratch reports whether a PostgreSQL URL names a scratch database made by
// ScratchPostgres: the raw ceilings refuse anything else.
func IsScratch(dbURL string) bool {
	u, err := url.Parse(dbURL)
	return err == nil && strings.HasPrefix(strings.TrimPrefix(u.Path, "/"), "herald_bench_")
}

// newNotification is the i-th raw create, written by the store's own
// statements, so that the raw transaction writes the same bytes herald's
// would.
func newNotification(i int) notify.NewNotification {
	return notify.NewNotification{Request: notify.CreateRequest{
		UserID:  fmt.Sprintf("raw-%d", i),
		Channel: notify.ChannelEmail,
		To:      "bench@example.com",
		Subject: fmt.Sprintf("herald bench %d", i),
		Body:    "Hello,\nthis is a notification sent by herald bench to measure the stack.\n",
	}}
}

// ScratchSchema creates the schema name in the scratch database at dbURL
// (see ScratchPostgres) and returns a URL whose connections work in it
// (search_path) and a func that drops it, with what it holds. herald's
// statements name their tables without a schema, so a store opened on the
// URL and migrated runs them unchanged on tables of its own, beside
// herald's.
func ScratchSchema(ctx context.Context, dbURL, name string) (string, func() error, error) {
	if !IsScratch(dbURL) {
		return "", nil, errors.New("scratch schema: refusing a database not made by the bench")
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", nil, errors.New("scratch schema: cannot parse the database url")
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", nil, fmt.Errorf("scratch schema: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+ident); err != nil {
		return "", nil, fmt.Errorf("scratch schema: create %s: %w", name, err)
	}
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			return fmt.Errorf("drop scratch schema %s: connect: %w", name, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+ident+` CASCADE`); err != nil {
			return fmt.Errorf("drop scratch schema %s: %w", name, err)
		}
		return nil
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// ScratchFile returns the path of a scratch SQLite file beside path, named
// after name, and a func that removes it with its -wal and -shm files.
func ScratchFile(path, name string) (string, func() error) {
	scratch := filepath.Join(filepath.Dir(path), name+"_"+Suffix()+".db")
	return scratch, func() error {
		var err error
		for _, f := range []string{scratch, scratch + "-wal", scratch + "-shm"} {
			if rerr := os.Remove(f); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("remove scratch file: %w", rerr))
			}
		}
		return err
	}
}
