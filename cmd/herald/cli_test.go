package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runBin runs the real binary in dir with env (on a clean environment) and
// returns its exit status and output (stdout and stderr together).
func runBin(t *testing.T, dir string, env map[string]string, args ...string) (int, string) {
	t.Helper()
	p := startHerald(t, dir, env, args...)
	p.waitExit(30 * time.Second)
	code := 0
	if err := p.Err(); err != nil {
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "%v", err)
		code = exit.ExitCode()
	}
	return code, p.Log()
}

// The command line's habits, as a user meets them: the exit status, and
// the whole of what herald says (a suggestion in one or two lines, never
// the whole usage).
func TestCommandLineHabits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "h.db")
	code, out := runBin(t, dir, map[string]string{"HERALD_DATABASE_URL": db}, "migrate")
	require.Equal(t, 0, code, out)

	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		// want are in the output; lines bounds its lines (0: no bound).
		want  []string
		lines int
	}{
		{"misspelt command", nil, []string{"wroker"}, 2, []string{`unknown command "wroker"; did you mean worker?`}, 1},
		{"unknown command", nil, []string{"frobnicate"}, 2, []string{`unknown command "frobnicate" (run 'herald --help'`}, 1},
		{"misspelt flag", nil, []string{"worker", "--prefech", "3"}, 2, []string{"unknown flag --prefech; did you mean --prefetch?"}, 1},
		{"another command's setting", nil, []string{"relay", "--prefetch", "3"}, 2, []string{"relay does not take --prefetch (HERALD_PREFETCH)"}, 1},
		{"misspelt flag before the command", nil, []string{"--databse-url", db, "outbox", "stats"}, 2, []string{"unknown flag --databse-url before the command; did you mean --database-url?"}, 1},
		{"misspelt subcommand", nil, []string{"dlq", "lsit"}, 2, []string{`unknown subcommand "lsit" of dlq; did you mean dlq list?`}, 1},
		{"misspelt notifications subcommand", nil, []string{"notifications", "shw"}, 2, []string{"did you mean notifications show?"}, 1},
		{"misspelt migrate subcommand", nil, []string{"migrate", "stauts"}, 2, []string{"did you mean migrate status?"}, 1},
		{"redrive without a selection", map[string]string{"HERALD_DATABASE_URL": db}, []string{"dlq", "redrive"}, 2, []string{"nothing selected"}, 1},
		{"dlq show without an id", map[string]string{"HERALD_DATABASE_URL": db}, []string{"dlq", "show"}, 2, []string{"dlq show takes one notification id"}, 1},
		{"dlq show with a bad id", map[string]string{"HERALD_DATABASE_URL": db}, []string{"dlq", "show", "x"}, 2, []string{`"x" is not a notification id`}, 1},
		{"negative limit", map[string]string{"HERALD_DATABASE_URL": db}, []string{"dlq", "list", "--limit", "-1"}, 2, []string{"must not be negative"}, 1},
		{"relay without a broker", map[string]string{"HERALD_DATABASE_URL": db}, []string{"relay"}, 2, []string{"herald relay needs HERALD_BROKER_URL"}, 1},
		{"bad database scheme", nil, []string{"outbox", "stats", "--database-url", "mysql://u:hunter2@db/x"}, 2, []string{"must start with postgres://", "mysql://u:xxxxx@db/x"}, 1},
		{"a key=value DSN is masked", nil, []string{"outbox", "stats", "--database-url", "host=db user=u password=hunter2 dbname=x"}, 2, []string{"password=xxxxx"}, 1},
		{"settings' flags before the command", nil, []string{"--database-url", db, "outbox", "stats"}, 0, []string{"unprocessed     0"}, 3},
		{"settings' flags before the command, = form", nil, []string{"--database-url=" + db, "dlq", "list"}, 0, []string{"0 dead letter(s)"}, 0},
		{"--version", nil, []string{"--version"}, 0, []string{"herald ", "commit "}, 3},
		{"version", nil, []string{"version"}, 0, []string{"herald "}, 3},
		{"one prefix per error", map[string]string{"HERALD_DATABASE_URL": db}, []string{"notifications", "show", "999"}, 1, []string{"herald: get notification 999: not found"}, 1},
		{"one prefix per error, dlq", map[string]string{"HERALD_DATABASE_URL": db}, []string{"dlq", "show", "999"}, 1, []string{"herald: get notification 999: not found"}, 1},
		{"a one-shot command warns of unknown variables", map[string]string{"HERALD_DATABASE_URL": db, "HERALD_RETRY_DELAYS": "1s"}, []string{"outbox", "stats"}, 0,
			[]string{"herald: warning: unknown variable HERALD_RETRY_DELAYS is ignored; did you mean HERALD_RETRY_DELAY?", "unprocessed"}, 4},
		{"a misspelt database variable stops migrate", map[string]string{"HERALD_DATABSE_URL": "postgres://u:hunter2@db/x"}, []string{"migrate"}, 2,
			[]string{"did you mean HERALD_DATABASE_URL?", "pass --database-url sqlite:herald.db"}, 2},
		{"a misspelt database variable stops serve", map[string]string{"HERALD_DATABSE_URL": "postgres://u:hunter2@db/x"}, []string{"serve"}, 2,
			[]string{"HERALD_DATABASE_URL is unset, so this would use the default database herald.db"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out := runBin(t, dir, tt.env, tt.args...)
			require.Equal(t, tt.code, code, out)
			for _, w := range tt.want {
				require.Contains(t, out, w)
			}
			require.NotContains(t, out, "hunter2")
			require.NotContains(t, out, "Commands:", "a mistake gets a suggestion, not the whole usage")
			if tt.lines > 0 {
				require.LessOrEqual(t, strings.Count(strings.TrimSpace(out), "\n")+1, tt.lines, out)
			}
			require.False(t, stutters(out), "an error says its subject once: %s", out)
		})
	}
	// The guard left no default database behind.
	require.NoFileExists(t, filepath.Join(dir, "herald.db"))
}

// migrate says which database it is about to change before it changes
// it, and that a SQLite file is new.
func TestMigrateNamesTheDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	path := filepath.Join(dir, "new.db")
	require.NoError(t, run(t.Context(), []string{"migrate", "--database-url", "sqlite:" + path}, func(string) string { return "" }, &stdout, &stderr))
	require.Equal(t, "migrate: database SQLite file "+path+" (new: it will be created)\n", stderr.String())
	_, err := os.Stat(path)
	require.NoError(t, err)
	stderr.Reset()
	require.NoError(t, run(t.Context(), []string{"migrate", "--database-url", "sqlite:" + path}, func(string) string { return "" }, &stdout, &stderr))
	require.Equal(t, "migrate: database SQLite file "+path+"\n", stderr.String())
	require.Equal(t, "PostgreSQL postgres://db:5432/x?sslmode=disable&password=xxxxx", describeDatabase("postgres://u:hunter2@db:5432/x?sslmode=disable&password=hunter3"))
}

// --database-url given on purpose (even with the default's value) goes
// ahead beside a misspelt variable; the correct name does too.
func TestDefaultDatabaseGuard(t *testing.T) {
	t.Parallel()
	environ := func() []string { return []string{"HERALD_DATABSE_URL=postgres://db/x"} }
	e := env{getenv: func(string) string { return "" }, environ: environ}
	cfg := Config{DatabaseURL: defaultDatabaseURL()}
	require.ErrorIs(t, guardDefaultDatabase("migrate", cfg, e, false), errUsage)
	require.NoError(t, guardDefaultDatabase("migrate", cfg, e, true))
	require.NoError(t, guardDefaultDatabase("migrate", Config{DatabaseURL: "sqlite:other.db"}, e, false))
	e.getenv = func(k string) string {
		if k == "HERALD_DATABASE_URL" {
			return defaultDatabaseURL()
		}
		return ""
	}
	require.NoError(t, guardDefaultDatabase("migrate", cfg, e, false))
	require.NoError(t, guardDefaultDatabase("migrate", cfg, env{getenv: func(string) string { return "" }, environ: func() []string { return []string{"HERALD_SMPT_URL=x"} }}, false))

	require.True(t, databaseFlagGiven([]string{"--database-url=x"}, env{}))
	require.True(t, databaseFlagGiven(nil, env{globals: []string{"--database-url=x"}}))
	require.False(t, databaseFlagGiven([]string{"--", "--database-url=x"}, env{}))
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	cmds := allCommandNames()
	for name, want := range map[string]string{
		"wroker":             "worker",
		"serv":               "serve",
		"migrat":             "migrate",
		"notif":              "notifications",
		"rleay":              "relay",
		"HERALD_DATABSE_URL": "",
	} {
		got, ok := suggest(name, cmds)
		require.Equal(t, want != "", ok, name)
		require.Equal(t, want, got, name)
	}
	for _, far := range []string{"x", "frobnicate", "delete"} {
		_, ok := suggest(far, cmds)
		require.False(t, ok, far)
	}
	var envs []string
	for _, s := range settings {
		envs = append(envs, s.env)
	}
	got, ok := suggest("HERALD_DATABSE_URL", envs)
	require.True(t, ok)
	require.Equal(t, "HERALD_DATABASE_URL", got)
	require.Equal(t, 1, editDistance("wroker", "worker"))
	require.Equal(t, 3, editDistance("kitten", "sitting"))
}

// Every setting's flag may stand before the command, in either form; a
// bool needs no value; the command's own line wins.
func TestGlobalFlags(t *testing.T) {
	t.Parallel()
	globals, rest, err := globalFlags([]string{"--database-url", "sqlite:a.db", "--debug-faults", "--prefetch=3", "worker", "--prefetch", "4"})
	require.NoError(t, err)
	require.Equal(t, []string{"--database-url=sqlite:a.db", "--debug-faults", "--prefetch=3"}, globals)
	require.Equal(t, []string{"worker", "--prefetch", "4"}, rest)
	c, _, err := parseConfig("worker", "", rest[1:], env{getenv: func(string) string { return "" }, globals: globals}, nil)
	require.NoError(t, err)
	require.Equal(t, 4, c.Prefetch)
	require.Equal(t, "sqlite:a.db", c.DatabaseURL)
	require.True(t, c.DebugFaults)

	for _, bad := range [][]string{{"--database-url"}, {"--nope", "x", "serve"}} {
		_, _, err := globalFlags(bad)
		require.ErrorIs(t, err, errUsage, "%v", bad)
	}
	_, rest, err = globalFlags([]string{"--help"})
	require.NoError(t, err)
	require.Equal(t, []string{"--help"}, rest)
}

// Every command, one-shot ones included, warns of unknown HERALD_*
// variables; a long-running one logs the warning before it opens anything.
func TestUnknownVariablesEveryCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "x.db")
	environ := func() []string { return []string{"HERALD_PREFETHC=3", "HERALD_DATABASE_URL=" + db} }
	getenv := func(k string) string {
		if k == "HERALD_DATABASE_URL" {
			return db
		}
		return ""
	}
	for _, args := range [][]string{{"migrate"}, {"migrate", "status"}, {"outbox", "stats"}, {"dlq", "list"}, {"notifications", "list"}, {"version"}, {"worker"}} {
		var stdout, stderr bytes.Buffer
		_ = runEnv(t.Context(), args, env{getenv: getenv, environ: environ, stdout: &stdout, stderr: &stderr})
		require.Contains(t, stderr.String(), "unknown variable HERALD_PREFETHC is ignored; did you mean HERALD_PREFETCH?", "%v", args)
	}
}

// stutters reports whether a line of out names the same "noun N" in two
// of its ": "-separated parts (notification 999: get notification 999).
func stutters(out string) bool {
	subject := regexp.MustCompile(`[a-z]+ \d+`)
	for _, line := range strings.Split(out, "\n") {
		seen := map[string]bool{}
		for _, part := range strings.Split(line, ": ") {
			for _, s := range subject.FindAllString(part, -1) {
				if seen[s] {
					return true
				}
			}
			for _, s := range subject.FindAllString(part, -1) {
				seen[s] = true
			}
		}
	}
	return false
}

func TestStutters(t *testing.T) {
	t.Parallel()
	require.True(t, stutters("herald: notification 999: get notification 999: not found"))
	require.False(t, stutters("herald: get notification 999: not found"))
}
