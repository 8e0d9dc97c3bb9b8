package main

// The tables of docs/design.md, docs/api.md, docs/operations.md,
// docs/channels.md and docs/development.md are held against the code here, as docs/configuration.md is by TestConfigurationDoc:
// a variable, command, route, query parameter, error code, metric, package
// or fuzz target added without its row fails, and each failure names the
// file, the table and the row to add (or to remove).

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository, seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	require.NoError(t, err)
	return string(b)
}

// mdTable returns the rows (without the header and its rule) of the first
// table under heading (a whole "## ..." line) whose first header cell is
// first, each row as its cells, trimmed. It fails the test when there is
// none: the table itself is what the test checks.
func mdTable(t *testing.T, file, heading, first string) [][]string {
	t.Helper()
	doc := readRepoFile(t, file)
	lines := strings.Split(doc, "\n")
	level := strings.Index(heading, " ")
	in := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "#") {
			n := strings.Index(l, " ")
			switch {
			case l == heading:
				in = true
				continue
			case in && n > 0 && n <= level:
				in = false
			}
		}
		if !in || !strings.HasPrefix(l, "|") {
			continue
		}
		if cells := mdCells(l); len(cells) > 0 && cells[0] == first && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "|---") {
			var rows [][]string
			for _, r := range lines[i+2:] {
				if !strings.HasPrefix(r, "|") {
					break
				}
				rows = append(rows, mdCells(r))
			}
			return rows
		}
	}
	t.Fatalf("%s: no table with a first column %q under %q", file, first, heading)
	return nil
}

// mdCells splits a table line into its cells; "\|" stays inside a cell.
func mdCells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

var backticked = regexp.MustCompile("`([^`]*)`")

// codeSpans returns the `code spans` of a cell, in order.
func codeSpans(cell string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// The configuration table of docs/design.md has one row for every setting,
// none for a variable that no setting has, and the settings' defaults.
func TestDesignConfigurationTable(t *testing.T) {
	const file, heading = "docs/design.md", "## Configuration (environment; flags override)"
	documented := map[string]string{} // variable -> default as documented ("" for unset)
	for _, row := range mdTable(t, file, heading, "variable") {
		require.GreaterOrEqual(t, len(row), 3, "%s: a row of %q has fewer than 3 cells: %q", file, heading, row)
		vars := strings.Split(strings.ReplaceAll(row[0], "`", ""), ",")
		defs := codeSpans(row[1])
		for i, v := range vars {
			v = strings.TrimSpace(v)
			switch {
			case strings.HasPrefix(row[1], "unset"):
				documented[v] = ""
			case i < len(defs):
				documented[v] = defs[i]
			case len(defs) > 0:
				documented[v] = defs[len(defs)-1]
			default:
				documented[v] = "?" + row[1]
			}
		}
	}
	known := map[string]bool{}
	for _, s := range settings {
		known[s.env] = true
		def, ok := documented[s.env]
		if !ok {
			shown := "unset"
			if s.def != "" {
				shown = "`" + s.def + "`"
			}
			t.Errorf("%s, table under %q: no row for %s; add:\n| %s | %s | %s |", file, heading, s.env, s.env, shown, s.usage)
			continue
		}
		if def != s.def {
			t.Errorf("%s, table under %q: %s's default is %q there and %q in cmd/herald/config.go (and docs/configuration.md)", file, heading, s.env, def, s.def)
		}
	}
	for v := range documented {
		if !known[v] {
			t.Errorf("%s, table under %q: a row names %s, which no setting in cmd/herald/config.go has; remove it or add the setting", file, heading, v)
		}
	}
}

// The commands table of docs/design.md has one row per command and
// subcommand, each as `herald NAME`.
func TestDesignCommandsTable(t *testing.T) {
	const file, heading = "docs/design.md", "## Commands (one binary, `herald`)"
	documented := map[string]bool{}
	for _, row := range mdTable(t, file, heading, "command") {
		for _, c := range codeSpans(row[0]) {
			documented[strings.TrimPrefix(c, "herald ")] = true
		}
	}
	want := map[string]bool{}
	for _, s := range settings {
		for _, c := range strings.Fields(s.cmds) {
			want[strings.ReplaceAll(c, "-", " ")] = true
		}
	}
	for _, c := range commands() {
		group := false
		for w := range want {
			group = group || strings.HasPrefix(w, c.name+" ")
		}
		if !group || want[c.name] {
			want[c.name] = true
		} else {
			delete(want, c.name) // a group: its subcommands have the rows
		}
	}
	for _, c := range slices.Sorted(func(yield func(string) bool) {
		for c := range want {
			if !yield(c) {
				return
			}
		}
	}) {
		if !documented[c] {
			t.Errorf("%s, table under %q: no row for the command %q; add:\n| `herald %s` | ... |", file, heading, c, c)
		}
	}
	for c := range documented {
		if !want[c] {
			t.Errorf("%s, table under %q: a row names `herald %s`, which is no command; remove it", file, heading, c)
		}
	}
}

// apiOperation is one operation of internal/api/openapi.json, the API's
// one route table.
type apiOperation struct {
	route string   // "GET /notifications/{id}"
	id    string   // operationId
	query []string // its query parameters
}

func apiOperations(t *testing.T) []apiOperation {
	t.Helper()
	type param struct {
		Name string `json:"name"`
		In   string `json:"in"`
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal([]byte(readRepoFile(t, "internal/api/openapi.json")), &doc))
	var ops []apiOperation
	for path, item := range doc.Paths {
		var shared []param
		if raw, ok := item["parameters"]; ok {
			require.NoError(t, json.Unmarshal(raw, &shared))
		}
		for method, raw := range item {
			switch method {
			case "get", "head", "post", "put", "patch", "delete", "options":
			default:
				continue
			}
			var o struct {
				ID     string  `json:"operationId"`
				Params []param `json:"parameters"`
			}
			require.NoError(t, json.Unmarshal(raw, &o))
			op := apiOperation{route: strings.ToUpper(method) + " " + path, id: o.ID}
			for _, p := range append(slices.Clone(shared), o.Params...) {
				if p.In == "query" {
					op.query = append(op.query, p.Name)
				}
			}
			ops = append(ops, op)
		}
	}
	require.NotEmpty(t, ops)
	slices.SortFunc(ops, func(a, b apiOperation) int { return strings.Compare(a.route, b.route) })
	return ops
}

// The routes table of docs/design.md has one row per operation of the
// OpenAPI document (which the server registers exactly), naming every query
// parameter; docs/api.md shows every route and parameter too.
func TestDesignRoutesTable(t *testing.T) {
	const file, heading = "docs/design.md", "## HTTP API (JSON in, JSON out)"
	rows := map[string]string{}
	for _, row := range mdTable(t, file, heading, "route") {
		spans := codeSpans(row[0])
		require.NotEmpty(t, spans, "%s: a route row without a `METHOD /path`: %q", file, row)
		rows[spans[0]] = strings.Join(row, " | ")
	}
	apiDoc := readRepoFile(t, "docs/api.md")
	known := map[string]bool{}
	for _, op := range apiOperations(t) {
		known[op.route] = true
		row, ok := rows[op.route]
		if !ok {
			t.Errorf("%s, table under %q: no row for %s (operationId %s); add:\n| `%s` | ... |", file, heading, op.route, op.id, op.route)
		}
		if !regexp.MustCompile("`" + regexp.QuoteMeta(op.route) + "[`?]").MatchString(apiDoc) {
			t.Errorf("docs/api.md: %s (operationId %s) is not shown; add a section \"### `%s`\"", op.route, op.id, op.route)
		}
		for _, q := range op.query {
			if ok && !strings.Contains(row, "`"+q+"`") {
				t.Errorf("%s, table under %q: the row of %s does not name its query parameter `%s`", file, heading, op.route, q)
			}
			if !strings.Contains(apiDoc, "`"+q+"`") && !strings.Contains(apiDoc, q+"=") {
				t.Errorf("docs/api.md: the query parameter %s of %s is not described", q, op.route)
			}
		}
	}
	for r := range rows {
		if !known[r] {
			t.Errorf("%s, table under %q: the row %s is no operation of internal/api/openapi.json; remove it", file, heading, r)
		}
	}
}

// apiErrorCodes are the error codes internal/api answers with: the string
// given to the Code field of its error replies.
func apiErrorCodes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	dir := filepath.Join(repoRoot, "internal", "api")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Code" {
				if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					seen[s] = true
				}
			}
			return true
		})
	}
	require.NotEmpty(t, seen, "no error code found in internal/api: has the way codes are written changed? Update apiErrorCodes")
	return slices.Sorted(func(yield func(string) bool) {
		for c := range seen {
			if !yield(c) {
				return
			}
		}
	})
}

// The error tables of docs/design.md and docs/api.md list every error code
// the API answers with, and no other.
func TestErrorCodeTables(t *testing.T) {
	codes := apiErrorCodes(t)
	for _, table := range []struct{ file, heading string }{
		{"docs/design.md", "## HTTP API (JSON in, JSON out)"},
		{"docs/api.md", "## Errors"},
	} {
		documented := map[string]bool{}
		for _, row := range mdTable(t, table.file, table.heading, "status") {
			require.GreaterOrEqual(t, len(row), 3, "%s: an error row has fewer than 3 cells: %q", table.file, row)
			for _, c := range codeSpans(row[2]) {
				documented[c] = true
			}
		}
		for _, c := range codes {
			if !documented[c] {
				t.Errorf("%s, error table under %q: the code `%s` (answered by internal/api) is missing; add it to the row of its status", table.file, table.heading, c)
			}
		}
		for c := range documented {
			if !slices.Contains(codes, c) {
				t.Errorf("%s, error table under %q: `%s` is no code internal/api answers with; remove it", table.file, table.heading, c)
			}
		}
	}
}

// metricNames are the names of the Prometheus metrics herald's packages
// register: the Name of every prometheus.*Opts literal under internal/.
func metricNames(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(repoRoot, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := cl.Type.(*ast.SelectorExpr)
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "prometheus" {
				return true
			}
			for _, e := range cl.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				k, _ := kv.Key.(*ast.Ident)
				lit, _ := kv.Value.(*ast.BasicLit)
				if k != nil && k.Name == "Name" && lit != nil && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					seen[s] = true
				}
				if k != nil && (k.Name == "Namespace" || k.Name == "Subsystem") {
					t.Errorf("%s: a metric's name is built from %s; metricNames reads only Name: extend it", path, k.Name)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, seen)
	return slices.Sorted(func(yield func(string) bool) {
		for c := range seen {
			if !yield(c) {
				return
			}
		}
	})
}

// The metric tables of docs/design.md and docs/operations.md list every
// metric herald registers, and no other.
func TestMetricTables(t *testing.T) {
	names := metricNames(t)
	for _, table := range []struct{ file, heading string }{
		{"docs/design.md", "## Metrics"},
		{"docs/operations.md", "## Metrics"},
	} {
		documented := map[string]bool{}
		for _, row := range mdTable(t, table.file, table.heading, "metric") {
			for _, c := range codeSpans(row[0]) {
				name, _, _ := strings.Cut(c, "{")
				documented[name] = true
			}
		}
		for _, n := range names {
			if !documented[n] {
				t.Errorf("%s, metric table under %q: no row for %s; add:\n| `%s` | PROCESSES | MEANING |", table.file, table.heading, n, n)
			}
		}
		for n := range documented {
			if !slices.Contains(names, n) {
				t.Errorf("%s, metric table under %q: %s is registered by no package under internal/; remove its row", table.file, table.heading, n)
			}
		}
	}
}

// goPackages lists the repository's directories that hold a Go package
// (a non-test .go file), relative and slash-separated.
func goPackages(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != repoRoot && (strings.HasPrefix(n, ".") || n == "testdata" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	require.NoError(t, err)
	return slices.Sorted(func(yield func(string) bool) {
		for p := range seen {
			if !yield(p) {
				return
			}
		}
	})
}

// The code map of docs/development.md names every package, and only
// packages that exist.
func TestCodeMap(t *testing.T) {
	const file, heading = "docs/development.md", "## Code map"
	documented := map[string]bool{}
	for _, row := range mdTable(t, file, heading, "package") {
		for _, p := range codeSpans(row[0]) {
			documented[strings.TrimSuffix(p, "/")] = true
		}
	}
	pkgs := goPackages(t)
	for _, p := range pkgs {
		if !documented[p] {
			t.Errorf("%s, table under %q: the package %s has no row; add:\n| `%s` | WHAT IT OWNS |", file, heading, p, p)
		}
	}
	for p := range documented {
		if !slices.Contains(pkgs, p) {
			t.Errorf("%s, table under %q: %s is no package of the repository; remove it", file, heading, p)
		}
	}
}

// Every fuzz target is named in docs/development.md and run by the
// Makefile's fuzz target, and the doc gives no count of them to go stale.
func TestFuzzTargetsDocumented(t *testing.T) {
	const file = "docs/development.md"
	doc := readRepoFile(t, file)
	makefile := readRepoFile(t, "Makefile")
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	n := 0
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, filepath.Dir(path))
		pkg := "./" + filepath.ToSlash(rel) + "/"
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(b), -1) {
			n++
			if !strings.Contains(doc, "`"+m[1]+"`") {
				t.Errorf("%s: the fuzz target %s (%s) is not named; add it to the paragraph on fuzz targets", file, m[1], pkg)
			}
			if !strings.Contains(makefile, "-fuzz '^"+m[1]+"$$' -fuzztime $(FUZZTIME) "+pkg) {
				t.Errorf("Makefile: the fuzz target lacks %s of %s; add: $(GO) test -run '^$$' -fuzz '^%s$$' -fuzztime $(FUZZTIME) %s", m[1], pkg, m[1], pkg)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, n)
	if m := regexp.MustCompile(`(?i)\b(\d+|two|three|four|five|six|seven|eight|nine|ten) fuzz targets`).FindString(doc); m != "" {
		t.Errorf("%s: %q counts the fuzz targets (there are %d); name them instead", file, m, n)
	}
}

// The isolation table of docs/channels.md names real settings, with their
// real defaults: each `HERALD_...` in a row's check is a setting (a
// HERALD_<CHANNEL>_... name is one for every channel but email, which
// keeps its older names), and a "default N" beside a single setting is
// that setting's default.
func TestIsolationTable(t *testing.T) {
	defaults := map[string]string{}
	for _, s := range settings {
		defaults[s.env] = s.def
	}
	rows := mdTable(t, "docs/channels.md", "## Isolation", "check")
	require.NotEmpty(t, rows)
	defaultN := regexp.MustCompile(`default (\S+?)[ ;,)]`)
	for _, row := range rows {
		var named []string
		for _, c := range codeSpans(row[0]) {
			if !strings.HasPrefix(c, "HERALD_") {
				continue
			}
			if strings.Contains(c, "<CHANNEL>") {
				for _, ch := range []string{"WEBHOOK", "TELEGRAM"} {
					n := strings.Replace(c, "<CHANNEL>", ch, 1)
					_, ok := defaults[n]
					require.True(t, ok, "docs/channels.md, isolation table: %s (from %s) is no setting", n, c)
				}
				continue
			}
			_, ok := defaults[c]
			require.True(t, ok, "docs/channels.md, isolation table: %s is no setting", c)
			named = append(named, c)
		}
		if m := defaultN.FindStringSubmatch(row[0]); m != nil && len(named) == 1 {
			require.Equal(t, defaults[named[0]], m[1], "docs/channels.md, isolation table: the default of %s", named[0])
		}
	}
}

// The README opens with the two commands a newcomer needs: the first thing
// under its title is a shell block that runs herald serve and make test.
func TestReadmeOpensWithCommands(t *testing.T) {
	lines := strings.Split(readRepoFile(t, "README.md"), "\n")
	require.True(t, strings.HasPrefix(lines[0], "# "), "README.md starts with its title")
	var rest []string
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) != "" || len(rest) > 0 {
			rest = append(rest, l)
		}
	}
	require.NotEmpty(t, rest)
	require.Equal(t, "```sh", rest[0], "README.md: the first thing under the title is a ```sh block")
	var block []string
	for _, l := range rest[1:] {
		if l == "```" {
			break
		}
		block = append(block, strings.TrimSpace(strings.Split(l, "#")[0]))
	}
	require.Equal(t, []string{"go run ./cmd/herald serve", "make test"}, block, "README.md's opening block")
}

// The README's map of the docs links every page of docs/ (one item each,
// saying what is there), and only pages that exist.
func TestReadmeDocsMap(t *testing.T) {
	const heading = "## Documentation"
	readme := readRepoFile(t, "README.md")
	_, section, ok := strings.Cut(readme, "\n"+heading+"\n")
	require.True(t, ok, "README.md has no %q section", heading)
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	item := regexp.MustCompile(`(?m)^- \[docs/([a-z0-9-]+\.md)\]\(docs/([a-z0-9-]+\.md)\): \S.*$`)
	mapped := map[string]bool{}
	for _, m := range item.FindAllStringSubmatch(section, -1) {
		require.Equal(t, m[1], m[2], "README.md, %q: an item's text and link name the same page", heading)
		require.False(t, mapped[m[1]], "README.md, %q: docs/%s is listed twice", heading, m[1])
		mapped[m[1]] = true
	}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	for _, p := range pages {
		name := filepath.Base(p)
		if !mapped[name] {
			t.Errorf("README.md, %q: docs/%s is not listed; add:\n- [docs/%s](docs/%s): WHAT IS THERE.", heading, name, name, name)
		}
		delete(mapped, name)
	}
	for name := range mapped {
		t.Errorf("README.md, %q: docs/%s does not exist; remove its item", heading, name)
	}
}

// The field table of docs/api.md's "When to deliver" section names every
// field that all channels' create bodies share beyond user_id, channel, to,
// subject and body (send_at, expires_at, the quiet hours, urgent), as the OpenAPI
// document declares them, and nothing else.
func TestTimingFieldsTable(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Const string `json:"const"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(readRepoFile(t, "internal/api/openapi.json")), &doc))
	common := map[string]int{}
	channels := 0
	for _, s := range doc.Components.Schemas {
		if s.Properties["channel"].Const == "" {
			continue // not a channel's create body
		}
		channels++
		for p := range s.Properties {
			common[p]++
		}
	}
	require.GreaterOrEqual(t, channels, 3, "the OpenAPI document's channel create bodies (a channel property with a const)")
	var want []string
	apiDoc := readRepoFile(t, "docs/api.md")
	for p, n := range common {
		switch p {
		case "user_id", "channel", "to", "subject", "body":
			continue
		case "template", "template_version", "data", "category", "channels":
			// What the content is rendered from, whom it may reach and
			// on which channels in turn, not when it goes: docs/api.md's
			// templates, preferences and fallback sections say how a
			// create uses them.
			require.Contains(t, apiDoc, "`"+p+"`", "docs/api.md describes the create field %s", p)
			continue
		}
		if n == channels {
			want = append(want, p)
		}
	}
	var got []string
	for _, row := range mdTable(t, "docs/api.md", "#### When to deliver: `send_at`, `expires_at`, quiet hours, cancel", "field") {
		got = append(got, codeSpans(row[0])...)
	}
	require.ElementsMatch(t, want, got, "docs/api.md's timing field table against the fields every channel's create body has (internal/api/openapi.json)")
}
