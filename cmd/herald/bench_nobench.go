//go:build nobench

package main

import (
	"context"
	"errors"
)

// errNoBench is herald bench's answer in a binary built with -tags nobench
// (the shipped image): such a binary links no test server, and the bench
// runs its provider in-process.
var errNoBench = errors.New("this herald was built with -tags nobench; build without it to run herald bench")

// cmdBench is herald bench without the bench: a usage error (exit code 2)
// that says how to get one.
func cmdBench(context.Context, []string, env) error {
	return usageError{errNoBench}
}
