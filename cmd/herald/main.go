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
	"strings"
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
	// globals are the settings' flags given before the command; every
	// command parses them before its own.
	globals []string
	// warned, when set, is set once a long-running command has logged the
	// unknown-variable warnings.
	warned *bool
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
		{"destinations", "destinations list | enable: failing and disabled destinations", cmdDestinations},
		{"notifications", "notifications list | show: notifications, newest first; one with its attempts", cmdNotifications},
		{"recipients", "recipients put | get | delete | erase | preferences: where users are reached and what they opted out of; erasure requests", cmdRecipients},
		{"templates", "templates put | get | preview: versioned content per channel and locale", cmdTemplates},
		{"bench", "load and measure the configured stack against its raw limits", cmdBench},
		{"version", "version, commit and Go version", cmdVersion},
	}
}

// run is herald's whole command line; the end-to-end tests call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runEnv(ctx, args, env{getenv: getenv, stdout: stdout, stderr: stderr})
}

// runEnv is run with the whole env, as main calls it. Whatever it
// returns has the secrets of the configuration masked.
func runEnv(ctx context.Context, args []string, e env) error {
	sc := newScrubber(inputSecrets(args, e))
	return sc.err(dispatch(ctx, args, e))
}

// dispatch runs the command args name, after the settings' flags that
// stand before it.
func dispatch(ctx context.Context, args []string, e env) error {
	stdout, stderr := e.stdout, e.stderr
	globals, args, err := globalFlags(args)
	if err != nil {
		return err
	}
	e.globals = globals
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	switch {
	case len(args) == 0:
		usage(stderr)
		return errUsage
	case args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" && len(args) == 1:
		usage(stdout)
		return nil
	case args[0] == "--version" || args[0] == "-version":
		args = append([]string{"version"}, args[1:]...)
	case args[0] == "help":
		// herald help CMD [SUB] is herald CMD [SUB] --help.
		args = append(args[1:], "--help")
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if !longRunning(c.name) {
				warnUnknownVariables(e)
				return explainUnauthorized(c.run(ctx, args[1:], e), tokenGiven(e, args[1:]))
			}
			// A long-running command logs the warnings; one that stopped
			// before its logger existed prints them.
			logged := false
			e.warned = &logged
			err := c.run(ctx, args[1:], e)
			if err != nil && !logged {
				warnUnknownVariables(e)
			}
			return err
		}
	}
	return unknownCommand(args[0])
}

// longRunning reports whether a command is a process that logs (its
// warnings go to its log, not to stderr as plain lines).
func longRunning(name string) bool {
	switch name {
	case "serve", "api", "relay", "worker":
		return true
	}
	return false
}

// inputSecrets lists what the command line and the environment give
// herald, for the scrubber of its errors.
func inputSecrets(args []string, e env) []secretSource {
	var out []secretSource
	for _, s := range settings {
		if v, ok := lookup(e.getenv, s.env); ok {
			out = append(out, secretSource{value: v, secret: s.secret})
		}
	}
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		for _, s := range settings {
			if s.flag == name {
				out = append(out, secretSource{value: value, secret: s.secret})
			}
		}
	}
	return out
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: herald COMMAND [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'herald COMMAND --help' for the flags of a command. Every flag has an environment variable (HERALD_...),\nand the settings' flags may also stand before the command. 'herald --version' prints the version.")
}
