package main

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apiclient "github.com/heraldhq/herald/client"
)

// This file is what a command sent through the API (HERALD_API_URL) adds
// to the API's refusals, so that its error names the fix.

// explainUnauthorized adds to the API's 401 (a command given
// HERALD_API_URL) what to do about it: send the API's token, or the right
// one. given is whether this command had a token to send.
func explainUnauthorized(err error, given bool) error {
	e, ok := errors.AsType[*apiclient.Error](err)
	if !ok || e.StatusCode != http.StatusUnauthorized {
		return err
	}
	if given {
		return fmt.Errorf("%w: the API refused the token given (HERALD_API_TOKEN or --api-token): give the one the API was started with, its HERALD_API_TOKEN", err)
	}
	return fmt.Errorf("%w: the API at HERALD_API_URL needs a token: set HERALD_API_TOKEN (or --api-token) to the one the API was started with, its HERALD_API_TOKEN", err)
}

// tokenGiven reports whether a command line (the settings' flags before
// the command included) or the environment gives HERALD_API_TOKEN.
func tokenGiven(e env, args []string) bool {
	if _, ok := lookup(e.getenv, "HERALD_API_TOKEN"); ok {
		return true
	}
	for _, a := range append(slices.Clone(e.globals), args...) {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "api-token" {
			return true
		}
	}
	return false
}
