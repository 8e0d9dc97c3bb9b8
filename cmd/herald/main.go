// Command herald is a notification service that never loses a notification
// and never applies one twice. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go forceExitOnSecondSignal(ctx)
	err := runEnv(ctx, os.Args[1:], env{getenv: os.Getenv, environ: os.Environ, stdout: os.Stdout, stderr: os.Stderr})
	stop()
	switch {
	case err == nil:
	case errors.Is(err, errHelp):
	case errors.Is(err, errUsage):
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "herald:", err)
		}
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "herald:", err)
		os.Exit(1)
	}
}

// errUsage is returned for a command line that names no known command; the
// usage has been printed.
var errUsage = errors.New("usage")

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, env env) error
}

// forceExitOnSecondSignal waits for the first SIGINT/SIGTERM (ctx ends and
// the process shuts down gracefully), then exits at once on a second one:
// an operator who presses Ctrl-C twice means it. Whatever was in flight is
// handed back by the broker or the lease, as after a crash.
func forceExitOnSecondSignal(ctx context.Context) {
	<-ctx.Done()
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	s := <-c
	fmt.Fprintf(os.Stderr, "herald: second %s: exiting now; deliveries in flight come back after their lease or with the broker\n", s)
	os.Exit(1)
}

// env is what a command sees of the world.
type env struct {
	getenv func(string) string
	// environ lists the environment, for the check of HERALD_* names; nil
	// skips the check.
	environ func() []string
	stdout  io.Writer
	stderr  io.Writer
}

func commands() []command {
	return []command{
		{"serve", "api + relay + worker + monitor in one process", cmdServe},
		{"api", "HTTP API, /metrics, backlog monitor and alert", cmdAPI},
		{"relay", "outbox -> broker", cmdRelay},
		{"worker", "broker (or outbox table) -> sender", cmdWorker},
		{"migrate", "apply the database migrations (idempotent)", cmdMigrate},
		{"outbox", "outbox stats | prune: the backlog, and retention on demand", cmdOutbox},
		{"dlq", "dlq list | show | redrive: dead letters", cmdDLQ},
		{"notifications", "notifications list | show: notifications, newest first; one with its attempts", cmdNotifications},
		{"bench", "load and measure the configured stack against its raw limits", cmdBench},
		{"version", "version, commit and Go version", cmdVersion},
	}
}

// run is herald's whole command line; the end-to-end tests call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runEnv(ctx, args, env{getenv: getenv, stdout: stdout, stderr: stderr})
}

// runEnv is run with the whole env, as main calls it.
func runEnv(ctx context.Context, args []string, e env) error {
	stdout, stderr := e.stdout, e.stderr
	switch {
	case len(args) == 0:
		usage(stderr)
		return errUsage
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help" && len(args) == 1:
		usage(stdout)
		return nil
	case args[0] == "help":
		// herald help CMD [SUB] is herald CMD [SUB] --help.
		args = append(args[1:], "--help")
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], e)
		}
	}
	fmt.Fprintf(stderr, "herald: unknown command %q\n\n", args[0])
	usage(stderr)
	return errUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: herald COMMAND [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'herald COMMAND --help' for the flags of a command. Every flag has an environment variable (HERALD_...).")
}
