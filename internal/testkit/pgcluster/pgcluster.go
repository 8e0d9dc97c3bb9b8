// Package pgcluster starts and removes private PostgreSQL servers for tests
// and the chaos harness: a primary, streaming standbys made with
// pg_basebackup (synchronous or not), a promotion, and a PgBouncer in front
// of them. Each server listens on a free loopback port with trust
// authentication, keeps its data in a temporary directory of its own, and
// is removed by Close.
//
// It uses the machine's PostgreSQL binaries (initdb, pg_basebackup,
// postgres; /usr/lib/postgresql/VERSION/bin or PATH) and installs Debian's
// postgresql package when they are absent and it runs as root, as
// scripts/services.sh does. PostgreSQL refuses to run as root, so a root
// process runs the servers as the postgres user.
//
// Like proctest, nothing here takes a *testing.T: every failure is an
// error.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options are a primary's settings.
type Options struct {
	// Name is the server's cluster_name, which a standby also gives as
	// its application_name to the primary (synchronous_standby_names
	// names it). Default: "primary".
	Name string
	// MaxConnections is max_connections. Default: 200.
	MaxConnections int
	// Settings are more postgresql.conf settings, written as given
	// (a string value needs its own quotes).
	Settings map[string]string
}

// Cluster is one running PostgreSQL server: a primary, or a standby until
// it is promoted.
type Cluster struct {
	name string
	port int
	dir  string // the cluster's temporary directory: data, socket, log
	bin  string
	cred *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// startTimeout bounds a server's start, a base backup and a promotion.
const startTimeout = 2 * time.Minute

// StartPrimary initialises a new cluster and starts it.
func StartPrimary(ctx context.Context, o Options) (*Cluster, error) {
	if o.Name == "" {
		o.Name = "primary"
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = 200
	}
	c, err := newCluster(o.Name)
	if err != nil {
		return nil, err
	}
	if err := c.run(ctx, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-instructions"); err != nil {
		c.Close()
		return nil, err
	}
	conf := map[string]string{
		"max_connections": strconv.Itoa(o.MaxConnections),
		"wal_level":       "replica",
		"max_wal_senders": "10",
		"hot_standby":     "on",
	}
	for k, v := range o.Settings {
		conf[k] = v
	}
	if err := c.startNew(ctx, conf); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// StartStandby makes a streaming standby of primary with pg_basebackup -R
// and starts it. With sync, the primary then names it in
// synchronous_standby_names, so that a commit returns only once the
// standby has flushed it, and StartStandby returns once the primary lists
// it as synchronous. The standby's own configuration names the primary as
// its synchronous standby, as a failover manager's symmetric configuration
// would: once promoted it waits for one until told not to (ReleaseSync).
func StartStandby(ctx context.Context, primary *Cluster, sync bool) (*Cluster, error) {
	c, err := newCluster(primary.name + "_standby")
	if err != nil {
		return nil, err
	}
	if err := c.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
		"-D", c.data(), "-R", "-X", "stream", "-c", "fast"); err != nil {
		c.Close()
		return nil, err
	}
	conf := map[string]string{}
	if sync {
		conf["synchronous_standby_names"] = quote(ident(primary.name))
	}
	if err := c.startNew(ctx, conf); err != nil {
		c.Close()
		return nil, err
	}
	if sync {
		if err := primary.exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = "+quote(ident(c.name))); err != nil {
			c.Close()
			return nil, err
		}
		if err := primary.exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			c.Close()
			return nil, err
		}
	}
	want := "async"
	if sync {
		want = "sync"
	}
	err = poll(ctx, startTimeout, func(ctx context.Context) (bool, error) {
		var state string
		err := primary.queryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'", []any{c.name}, &state)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil && state == want, err
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("standby %s: not streaming as %s: %w\n%s", c.name, want, err, c.LogTail(2000))
	}
	return c, nil
}

func newCluster(name string) (*Cluster, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := serverDir("herald-pg-", cred)
	if err != nil {
		return nil, err
	}
	c := &Cluster{name: name, dir: dir, bin: bin, cred: cred}
	if c.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// configure appends settings to postgresql.conf, with the server's own
// port, socket directory and name (a base backup copies the primary's).
func (c *Cluster) configure(extra map[string]string) error {
	conf := map[string]string{
		"port":                    strconv.Itoa(c.port),
		"listen_addresses":        "'127.0.0.1'",
		"unix_socket_directories": quote(c.dir),
		"cluster_name":            quote(c.name),
	}
	for k, v := range extra {
		conf[k] = v
	}
	keys := make([]string, 0, len(conf))
	for k := range conf {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("\n# pgcluster\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, conf[k])
	}
	f, err := os.OpenFile(filepath.Join(c.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("pgcluster: %w", err)
	}
	return f.Close()
}

func (c *Cluster) data() string    { return filepath.Join(c.dir, "data") }
func (c *Cluster) logPath() string { return filepath.Join(c.dir, "server.log") }

// command returns a command of the PostgreSQL binaries run as the server's
// user.
func (c *Cluster) command(ctx context.Context, tool string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, tool), args...)
	cmd.Dir = c.dir
	cmd.Env = []string{"PATH=" + c.bin + ":/usr/bin:/bin", "LC_ALL=C", "HOME=" + c.dir, "PGHOST=" + c.dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	return cmd
}

// run runs a tool to its end.
func (c *Cluster) run(ctx context.Context, tool string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	out, err := c.command(ctx, tool, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: %s: %w\n%s", tool, err, out)
	}
	return nil
}

// Start starts the server (again, after Stop or Kill9) and waits until it
// takes connections.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.cmd != nil {
		c.mu.Unlock()
		return fmt.Errorf("pgcluster: %s is running", c.name)
	}
	logf, err := os.OpenFile(c.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("pgcluster: %w", err)
	}
	// Not CommandContext: the server outlives the call.
	cmd := c.command(context.Background(), "postgres", "-D", c.data())
	cmd.Stdout, cmd.Stderr = logf, logf
	// A harness that dies leaves no server behind: the postmaster gets
	// SIGKILL, and its children exit when they see it gone.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.mu.Unlock()
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	logf.Close()
	done := make(chan struct{})
	c.cmd, c.done = cmd, done
	c.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	err = poll(ctx, startTimeout, func(ctx context.Context) (bool, error) {
		select {
		case <-done:
			return false, permanent{errors.New("postgres exited")}
		default:
		}
		// Each try bounded: something else on the port that never
		// answers must not hold the poll past the server's exit.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, c.URL())
		if err != nil {
			return false, nil
		}
		conn.Close(cctx)
		return true, nil
	})
	if err != nil {
		select {
		case <-done: // it exited: it may be started again
			c.mu.Lock()
			c.cmd, c.done = nil, nil
			c.mu.Unlock()
		default:
		}
		return fmt.Errorf("pgcluster: %s did not start: %w\n%s", c.name, err, c.LogTail(2000))
	}
	return nil
}

// startNew configures a new server with conf on its port and starts it.
// The port was free when newCluster picked it, but another process may
// bind it before the server does (a test's listener, another cluster):
// a start that could not bind picks another port and tries again.
func (c *Cluster) startNew(ctx context.Context, conf map[string]string) error {
	for try := 1; ; try++ {
		if err := c.configure(conf); err != nil {
			return err
		}
		err := c.Start(ctx)
		if err == nil || try == 3 || !strings.Contains(c.LogTail(4000), "could not create any TCP/IP sockets") {
			return err
		}
		if c.port, err = freePort(); err != nil {
			return err
		}
		// The log's earlier bind failure must not count for the next try.
		if err := os.WriteFile(c.logPath(), nil, 0o644); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
}

// Kill9 kills the server's every process with SIGKILL at once, as the
// death of its machine would, and waits for the postmaster's exit. The
// postmaster's children are each a process group of their own (they call
// setsid), so they are found by their parent: the postmaster is stopped
// first, so that it forks no other, then it and every child are killed.
func (c *Cluster) Kill9() error {
	return c.halt(syscall.SIGKILL)
}

// Stop shuts the server down (fast shutdown: sessions are ended, the
// server checkpoints) and waits for it.
func (c *Cluster) Stop() error {
	return c.halt(syscall.SIGINT)
}

func (c *Cluster) halt(sig syscall.Signal) error {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.cmd, c.done = nil, nil
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pid := cmd.Process.Pid
	if sig == syscall.SIGKILL {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		kids := children(pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
	} else if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgcluster: signal %s: %w", c.name, err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("pgcluster: %s did not stop within a minute; killed", c.name)
	}
	return nil
}

// children lists the processes whose parent is pid (from /proc).
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(b)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) >= 2 {
			if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == pid {
				out = append(out, child)
			}
		}
	}
	return out
}

// Running reports whether the server's postmaster runs.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil
}

// Close kills the server if it runs and removes its directory.
func (c *Cluster) Close() {
	_ = c.Kill9()
	os.RemoveAll(c.dir)
}

// Name is the server's cluster_name.
func (c *Cluster) Name() string { return c.name }

// Port is the server's loopback port.
func (c *Cluster) Port() int { return c.port }

// Addr is the server's host:port.
func (c *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// URL is the server's postgres database, as the postgres user.
func (c *Cluster) URL() string { return c.DatabaseURL("postgres") }

// DatabaseURL is the URL of database db on the server.
func (c *Cluster) DatabaseURL(db string) string {
	return "postgres://postgres@" + c.Addr() + "/" + url.PathEscape(db) + "?sslmode=disable"
}

// MultiHostURL is the URL of database db on every host given (host:port),
// in order, for the server that takes writes
// (target_session_attrs=read-write): a client tries them in turn and keeps
// the first that is a primary.
func MultiHostURL(db string, hosts ...string) string {
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + url.PathEscape(db) + "?sslmode=disable&target_session_attrs=read-write"
}

// LogTail is the end of the server's log, at most n bytes.
func (c *Cluster) LogTail(n int) string {
	b, err := os.ReadFile(c.logPath())
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Promote ends a standby's recovery (pg_promote) and waits until it is a
// primary: out of recovery, its sessions read-write. A standby that names
// a synchronous standby of its own still makes each commit wait for one
// after this: ReleaseSync ends that.
func (c *Cluster) Promote(ctx context.Context) error {
	var ok bool
	if err := c.queryRow(ctx, "SELECT pg_promote(true, 60)", nil, &ok); err != nil {
		return fmt.Errorf("pgcluster: promote %s: %w", c.name, err)
	}
	if !ok {
		return fmt.Errorf("pgcluster: promote %s: not promoted within 60s\n%s", c.name, c.LogTail(2000))
	}
	err := poll(ctx, startTimeout, func(ctx context.Context) (bool, error) {
		var inRecovery bool
		err := c.queryRow(ctx, "SELECT pg_is_in_recovery()", nil, &inRecovery)
		return err == nil && !inRecovery, nil
	})
	if err != nil {
		return fmt.Errorf("pgcluster: promote %s: %w", c.name, err)
	}
	return nil
}

// ReleaseSync tells the server to stop waiting for a synchronous standby
// (ALTER SYSTEM SET synchronous_standby_names = ” and a reload: a RESET
// would leave the postgresql.conf line in force), as a failover manager
// does once the old primary is gone, and waits until a commit that wrote
// WAL goes through.
func (c *Cluster) ReleaseSync(ctx context.Context) error {
	if err := c.exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = ''"); err != nil {
		return err
	}
	if err := c.exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	err := poll(ctx, startTimeout, func(ctx context.Context) (bool, error) {
		// Creating a table writes catalog WAL, whose commit waits for a
		// synchronous standby as long as one is named (a bare
		// txid_current() writes none, and never waits). A temporary
		// table goes with its session.
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err := c.exec(ctx, "CREATE TEMP TABLE pgcluster_probe ()")
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("pgcluster: %s still waits for a synchronous standby: %w", c.name, err)
	}
	return nil
}

// exec runs one statement on the server's postgres database, in a session
// of its own.
func (c *Cluster) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return fmt.Errorf("pgcluster: connect to %s: %w", c.name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgcluster: %s: %s: %w", c.name, sql, err)
	}
	return nil
}

func (c *Cluster) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

// poll calls ok until it reports true, fails, or d passes; ctx's end stops
// it too.
func poll(ctx context.Context, d time.Duration, ok func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var last error
	for {
		done, err := ok(ctx)
		if done {
			return nil
		}
		var stop permanent
		if errors.As(err, &stop) {
			return stop.error
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// permanent is an error that ends a poll at once: waiting longer cannot
// help.
type permanent struct{ error }

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ident quotes a name as synchronous_standby_names lists it.
func ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// freePort returns a loopback port nothing listened on a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// serverDir makes a temporary directory, its name beginning with pattern,
// for a server (PostgreSQL or PgBouncer) that runs as cred: owned by that
// user when cred is not nil, so that the server can write its files and
// sockets there. It removes the directory again when it cannot hand it
// over.
func serverDir(pattern string, cred *syscall.Credential) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", fmt.Errorf("pgcluster: temp dir: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("pgcluster: give %s to the postgres user: %w", dir, err)
		}
	}
	return dir, nil
}

// serverCredential is the user the servers run as: the postgres user when
// this process is root, this process's own user otherwise (nil).
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: PostgreSQL does not run as root, and there is no postgres user to run it as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

var binaries struct {
	sync.Mutex
	dir string
}

// Binaries returns the directory of the machine's PostgreSQL server
// binaries: the newest /usr/lib/postgresql/VERSION/bin, else the directory
// of initdb on PATH. When there is none and this process is root, it
// installs Debian's postgresql package first.
func Binaries() (string, error) {
	binaries.Lock()
	defer binaries.Unlock()
	if binaries.dir != "" {
		return binaries.dir, nil
	}
	dir := findBinaries()
	if dir == "" {
		if err := aptInstall("postgresql"); err != nil {
			return "", fmt.Errorf("pgcluster: no PostgreSQL server binaries (initdb, pg_basebackup, postgres): %w", err)
		}
		if dir = findBinaries(); dir == "" {
			return "", errors.New("pgcluster: Debian's postgresql package installed no initdb")
		}
	}
	binaries.dir = dir
	return dir, nil
}

func findBinaries() string {
	has := func(dir string) bool {
		for _, tool := range []string{"initdb", "pg_basebackup", "postgres"} {
			if _, err := os.Stat(filepath.Join(dir, tool)); err != nil {
				return false
			}
		}
		return true
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool { return version(matches[i]) > version(matches[j]) })
	for _, m := range matches {
		if has(m) {
			return m
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real)
		}
	}
	return ""
}

// version is the major version in /usr/lib/postgresql/VERSION/bin.
func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

var aptMu sync.Mutex

// aptInstall installs Debian packages, as scripts/services.sh does; only
// root can.
func aptInstall(pkgs ...string) error {
	aptMu.Lock()
	defer aptMu.Unlock()
	if os.Geteuid() != 0 {
		return fmt.Errorf("install Debian's %s (this process is not root)", strings.Join(pkgs, ", "))
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("install %s: no apt-get on this machine", strings.Join(pkgs, ", "))
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	upd := exec.Command("apt-get", "update", "-qq")
	upd.Env = env
	if out, err := upd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w\n%s", err, out)
	}
	inst := exec.Command("apt-get", append([]string{"install", "-y", "-qq"}, pkgs...)...)
	inst.Env = env
	if out, err := inst.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}
