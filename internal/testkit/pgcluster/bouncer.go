package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bouncer is a PgBouncer in transaction pooling mode in front of one
// server: every database of its server, as the postgres user, trust
// authentication.
type Bouncer struct {
	port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
}

// StartBouncer starts a PgBouncer (Debian's pgbouncer package, installed
// when absent and this process is root) on a free loopback port in front
// of the server at addr (host:port), and waits until it answers. It gives
// up on an unreachable server quickly (server_login_retry 1s,
// query_wait_timeout 10s), as a pooler in front of a failover pair must.
func StartBouncer(ctx context.Context, addr string) (*Bouncer, error) {
	bin, err := bouncerBinary()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: bouncer target %q: %w", addr, err)
	}
	dir, err := serverDir("herald-pgbouncer-", cred)
	if err != nil {
		return nil, err
	}
	b := &Bouncer{dir: dir}
	fail := func(err error) (*Bouncer, error) {
		b.Close()
		return nil, err
	}
	if b.port, err = freePort(); err != nil {
		return fail(err)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
admin_users = postgres
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
server_login_retry = 1
query_wait_timeout = 10
logfile = %s
`, host, port, b.port, filepath.Join(dir, "userlist.txt"), filepath.Join(dir, "pgbouncer.log"))
	files := map[string]string{"pgbouncer.ini": ini, "userlist.txt": `"postgres" ""` + "\n"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return fail(fmt.Errorf("pgcluster: %w", err))
		}
	}
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	b.cmd.Dir = dir
	b.cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		return fail(fmt.Errorf("pgcluster: start pgbouncer: %w", err))
	}
	b.done = make(chan struct{})
	go func() {
		_ = b.cmd.Wait()
		close(b.done)
	}()
	// The admin console answers without a server behind it.
	err = poll(ctx, startTimeout, func(ctx context.Context) (bool, error) {
		select {
		case <-b.done:
			return false, errors.New("pgbouncer exited")
		default:
		}
		cfg, err := pgx.ParseConfig("postgres://postgres@" + b.Addr() + "/pgbouncer?sslmode=disable")
		if err != nil {
			return false, err
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return false, nil
		}
		conn.Close(ctx)
		return true, nil
	})
	if err != nil {
		return fail(fmt.Errorf("pgcluster: pgbouncer did not start: %w\n%s", err, b.LogTail(2000)))
	}
	return b, nil
}

// Addr is the bouncer's host:port.
func (b *Bouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// Port is the bouncer's loopback port.
func (b *Bouncer) Port() int { return b.port }

// LogTail is the end of the bouncer's log, at most n bytes.
func (b *Bouncer) LogTail(n int) string {
	data, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	if err != nil {
		return ""
	}
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

// Close kills the bouncer and removes its directory.
func (b *Bouncer) Close() {
	b.once.Do(func() {
		if b.cmd != nil && b.cmd.Process != nil {
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			select {
			case <-b.done:
			case <-time.After(30 * time.Second):
			}
		}
		os.RemoveAll(b.dir)
	})
}

// bouncerBinary finds pgbouncer (installing Debian's package when absent).
func bouncerBinary() (string, error) {
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if err := aptInstall("pgbouncer"); err != nil {
		return "", fmt.Errorf("pgcluster: no pgbouncer: %w", err)
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err != nil {
		return "", errors.New("pgcluster: Debian's pgbouncer package installed no /usr/sbin/pgbouncer")
	}
	return "/usr/sbin/pgbouncer", nil
}
