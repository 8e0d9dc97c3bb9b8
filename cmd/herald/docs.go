package main

import (
	"fmt"
	"strings"
)

// configurationDoc renders docs/configuration.md from the settings table,
// the same table the parser uses; TestConfigurationDoc keeps the file equal
// to it (go test ./cmd/herald -run TestConfigurationDoc -update rewrites it).
func configurationDoc() string {
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from the settings table in cmd/herald/config.go by
     go test ./cmd/herald -run TestConfigurationDoc -update; do not edit. -->

Every setting is an environment variable and a flag of the same name on the
commands that take it (` + "`HERALD_RETRY_DELAY`" + ` is ` + "`--retry-delay`" + `). A flag
overrides the environment, which overrides the default. ` + "`herald COMMAND --help`" + `
shows the value in effect, secrets masked. A ` + "`HERALD_*`" + ` variable that no setting
names is warned about by every command, with the closest known name. Every
flag may also stand before the command (` + "`herald --database-url URL outbox stats`" + `);
the command must take it.

| variable | flag | type | default | commands | meaning |
|---|---|---|---|---|---|
`)
	for _, s := range settings {
		def := "`" + s.def + "`"
		if s.def == "" {
			def = "unset"
		}
		typ := s.typeName()
		if s.oneOf != "" {
			typ = strings.ReplaceAll(s.oneOf, " ", " \\| ")
		}
		if s.secret {
			typ += " (secret)"
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | %s | %s | %s | %s |\n", s.env, s.flag, typ, def, strings.Join(commandNames(s.cmds), ", "), strings.ReplaceAll(s.usage, "|", "\\|"))
	}
	b.WriteString(`
Durations are Go durations (` + "`500ms`, `30s`, `5m`, `168h`" + `). Booleans take ` + "`1`/`true`" + ` or
` + "`0`/`false`" + `. An integer or duration out of range, or an unknown value of a choice,
stops the command with exit status 2 and names the flag, the variable and
where the value came from.
`)
	return b.String()
}

// commandNames lists the commands of a setting's cmds field as a reader
// types them ("dlq redrive"), once each, in the field's order.
func commandNames(field string) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range strings.Fields(field) {
		name := "`" + strings.ReplaceAll(c, "-", " ") + "`"
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}
