package main

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// This file holds the command line's habits: suggestions for a misspelt
// command, subcommand, flag or variable, the settings' flags given before
// the command, and the guards of the commands that create a database.

// suggest returns the candidate closest to name, if one is close enough to
// be what was meant: a small edit distance (a swap of two neighbours counts
// as one edit), or the only candidate name is a prefix of.
func suggest(name string, candidates []string) (string, bool) {
	best, dist := "", 1<<30
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(name), strings.ToLower(c)); d < dist || d == dist && c < best {
			best, dist = c, d
		}
	}
	if best != "" && dist <= max(1, min(3, len(name)/3)) {
		return best, true
	}
	if len(name) >= 3 {
		var prefixed []string
		for _, c := range candidates {
			if strings.HasPrefix(c, name) {
				prefixed = append(prefixed, c)
			}
		}
		if len(prefixed) == 1 {
			return prefixed[0], true
		}
	}
	return "", false
}

// didYouMean is "; did you mean X?" for the candidate closest to name, or
// "".
func didYouMean(name string, candidates []string, format string) string {
	if s, ok := suggest(name, candidates); ok {
		return "; did you mean " + fmt.Sprintf(format, s) + "?"
	}
	return ""
}

// editDistance is the optimal string alignment distance of a and b: the
// Levenshtein distance where swapping two neighbours is one edit
// ("wroker" is one edit from "worker").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// allCommandNames lists the commands, for suggestions.
func allCommandNames() []string {
	var out []string
	for _, c := range commands() {
		out = append(out, c.name)
	}
	return out
}

// unknownCommand is the usage error of a command line whose first word
// names no command.
func unknownCommand(name string) error {
	return usageError{fmt.Errorf("unknown command %q%s (run 'herald --help' for the list)", name, didYouMean(name, allCommandNames(), "%s"))}
}

// globalFlags splits the settings' flags that stand before the command
// (herald --database-url X outbox stats) from the rest of the line. Every
// setting's flag may stand there; the command it precedes must take it.
// --help, --version and a "--" that ends them are left at the head of rest.
func globalFlags(args []string) (globals, rest []string, err error) {
	byFlag := map[string]setting{}
	var names []string
	for _, s := range settings {
		byFlag[s.flag] = s
		names = append(names, s.flag)
	}
	for len(args) > 0 {
		arg := args[0]
		if !strings.HasPrefix(arg, "-") || arg == "-" || arg == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		switch name {
		case "h", "help", "version":
			return globals, args, nil
		}
		s, ok := byFlag[name]
		if !ok {
			return nil, nil, usageError{fmt.Errorf("unknown flag --%s before the command%s (run 'herald --help')", name, didYouMean(name, names, "--%s"))}
		}
		args = args[1:]
		if !hasValue && s.typeName() != "bool" {
			if len(args) == 0 {
				return nil, nil, usageError{fmt.Errorf("flag --%s needs a value", name)}
			}
			value, hasValue, args = args[0], true, args[1:]
		}
		if hasValue {
			globals = append(globals, "--"+name+"="+value)
		} else {
			globals = append(globals, "--"+name)
		}
	}
	return globals, args, nil
}

// flagError rewrites the flag package's error for a command's line: flags
// spelt with "--" as herald's help shows them, an unknown flag with the
// closest one the command takes, or the commands that take it when it is
// another command's setting.
func flagError(cmd string, fs *flag.FlagSet, err error) error {
	msg := err.Error()
	name, unknown := strings.CutPrefix(msg, "flag provided but not defined: -")
	if !unknown {
		msg = strings.ReplaceAll(msg, "flag -", "flag --")
		msg = strings.Replace(msg, "argument: -", "argument: --", 1)
		return fmt.Errorf("%s: %s (run 'herald %s --help')", cmd, msg, cmd)
	}
	for _, s := range settings {
		if s.flag == name {
			return fmt.Errorf("%s does not take --%s (%s): it is a setting of %s", cmd, name, s.env,
				strings.ReplaceAll(strings.ReplaceAll(s.cmds, " ", ", "), "-", " "))
		}
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return fmt.Errorf("%s: unknown flag --%s%s (run 'herald %s --help')", cmd, name, didYouMean(name, names, "--%s"), cmd)
}

// unknownVariable is a HERALD_* variable that no setting names.
type unknownVariable struct {
	name string
	// closest is the known name it most likely misspells, or "".
	closest string
}

func (u unknownVariable) String() string {
	w := "unknown variable " + u.name + " is ignored"
	if u.closest != "" {
		w += "; did you mean " + u.closest + "?"
	}
	return w
}

// unknownVariableList finds the HERALD_* variables of environ that no
// setting (nor a test or debug variable herald reads) names, each with the
// closest known name: a misspelt variable would otherwise be ignored in
// silence.
func unknownVariableList(environ []string) []unknownVariable {
	var known []string
	for _, s := range settings {
		known = append(known, s.env)
	}
	var out []unknownVariable
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "HERALD_") || slices.Contains(known, name) || strings.HasPrefix(name, "HERALD_TEST_") ||
			strings.HasPrefix(name, "HERALD_CHAOS_") || name == "HERALD_REQUIRE_SERVICES" {
			continue
		}
		closest, _ := suggest(name, known)
		out = append(out, unknownVariable{name: name, closest: closest})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// unknownVariables is unknownVariableList as warnings.
func unknownVariables(environ []string) []string {
	var out []string
	for _, u := range unknownVariableList(environ) {
		out = append(out, u.String())
	}
	return out
}

// environment returns the process environment of e, nil when e does not
// have it (tests calling run).
func (e env) environment() []string {
	if e.environ == nil {
		return nil
	}
	return e.environ()
}

// warnUnknownVariables prints the unknown-variable warnings of a one-shot
// command on stderr (long-running commands log them).
func warnUnknownVariables(e env) {
	for _, u := range unknownVariableList(e.environment()) {
		fmt.Fprintln(e.stderr, "herald: warning:", u)
	}
}

// defaultDatabaseURL is HERALD_DATABASE_URL's default.
func defaultDatabaseURL() string {
	for _, s := range settings {
		if s.env == "HERALD_DATABASE_URL" {
			return s.def
		}
	}
	return ""
}

// guardDefaultDatabase refuses to let cmd create or change the default
// SQLite database while the environment holds a misspelling of
// HERALD_DATABASE_URL: whoever set HERALD_DATABSE_URL=postgres://... meant
// that database, not a new ./herald.db. --database-url (even with the
// default's value) or the correct name goes ahead.
func guardDefaultDatabase(cmd string, cfg Config, e env, flagGiven bool) error {
	if flagGiven || cfg.DatabaseURL != defaultDatabaseURL() {
		return nil
	}
	if _, set := lookup(e.getenv, "HERALD_DATABASE_URL"); set {
		return nil
	}
	for _, u := range unknownVariableList(e.environment()) {
		if u.closest == "HERALD_DATABASE_URL" {
			return usageError{fmt.Errorf("%s: HERALD_DATABASE_URL is unset, so this would use the default database %s, but %s is set: "+
				"did you mean HERALD_DATABASE_URL? (to use %s on purpose, pass --database-url %s)",
				cmd, sqlitePath(cfg.DatabaseURL), u.name, sqlitePath(cfg.DatabaseURL), cfg.DatabaseURL)}
		}
	}
	return nil
}

// databaseFlagGiven reports whether the command line sets --database-url.
func databaseFlagGiven(args []string, e env) bool {
	for _, a := range append(slices.Clone(e.globals), args...) {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "database-url" {
			return true
		}
	}
	return false
}

// describeDatabase names the database a URL opens, for the line a command
// prints before it changes it: the engine and where (no secrets), and
// whether a SQLite file is about to be created.
func describeDatabase(url string) string { return describeStore(url, where, true) }
