package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3"; a
// plain go build reports the module version or "devel".
var version = ""

func cmdVersion(_ context.Context, args []string, e env) error {
	if _, err := parseFlags("version", "Prints herald's version, the commit it was built from and the Go version.", args, e, nil); err != nil {
		return err
	}
	v, commit, modified := version, "unknown", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
	}
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	fmt.Fprintf(e.stdout, "herald %s\ncommit %s%s\n%s %s/%s\n", v, commit, modified, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
