package proctest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RabbitNode is a RabbitMQ node started from the installed rabbitmq-server
// with a name, ports, data, logs and an Erlang cookie of its own, so that a
// test or the chaos harness may stop, kill and restart it without touching
// the machine's node.
type RabbitNode struct {
	// Name is the Erlang node name, rabbit-hN-SUFFIX@localhost.
	Name string
	// AMQPPort is the node's AMQP port on 127.0.0.1.
	AMQPPort int
	// Dir holds the node's configuration, data and logs.
	Dir string

	home     string // holds the cluster's .erlang.cookie
	bin      string // the rabbitmq-server scripts
	distPort int

	mu      sync.Mutex
	cmd     *exec.Cmd
	waitErr chan error
}

// URL is the node's AMQP URL (guest/guest, default vhost).
func (n *RabbitNode) URL() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.AMQPPort)
}

// Ctl runs rabbitmqctl (or another CLI of the scripts directory, such as
// rabbitmq-queues) against the node and returns its output.
func (n *RabbitNode) Ctl(ctx context.Context, tool string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.bin, tool), append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s on %s: %w: %s", tool, strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// env is the environment of the node's server and of the CLI run against
// it: nothing from the machine's node (its env file, config or cookie).
func (n *RabbitNode) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "ERL_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"HOME="+n.home,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(n.Dir, "rabbitmq-env.conf"),
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.Dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.Dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.Dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.Dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.Dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.Dir, "pid"),
	)
}

// start runs the node's server process in a process group of its own.
func (n *RabbitNode) start() error {
	out, err := os.OpenFile(filepath.Join(n.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(n.bin, "rabbitmq-server"))
	cmd.Env = append(n.env(), "RABBITMQ_DIST_PORT="+strconv.Itoa(n.distPort))
	cmd.Dir = n.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	waitErr := make(chan error, 1)
	go func() {
		waitErr <- cmd.Wait()
		out.Close()
	}()
	n.mu.Lock()
	n.cmd, n.waitErr = cmd, waitErr
	n.mu.Unlock()
	return nil
}

// Wait waits until the node runs its application, for up to d.
func (n *RabbitNode) Wait(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d+10*time.Second)
	defer cancel()
	// wait, unlike await_startup, also waits for the node to appear.
	_, err := n.Ctl(ctx, "rabbitmqctl", "wait", "--timeout", strconv.Itoa(int(d.Seconds())), filepath.Join(n.Dir, "pid"))
	return err
}

// Restart starts a node that Kill stopped again, with the same name, ports
// and data, and waits until it runs.
func (n *RabbitNode) Restart(ctx context.Context, d time.Duration) error {
	if n.Running() {
		return fmt.Errorf("%s is running", n.Name)
	}
	if err := n.start(); err != nil {
		return err
	}
	return n.Wait(ctx, d)
}

// Running reports whether the node's server process is alive.
func (n *RabbitNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Kill stops the node the hard way (SIGKILL to its process group), as a
// crashed machine would, and waits up to 30s for it to be gone.
func (n *RabbitNode) Kill() error {
	n.mu.Lock()
	cmd, waitErr := n.cmd, n.waitErr
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-waitErr:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("node %s still running 30s after SIGKILL", n.Name)
	}
}

// LogTail returns the end of the node's server output and of its own log,
// for a post-mortem.
func (n *RabbitNode) LogTail(max int) string {
	var b strings.Builder
	for _, f := range []string{"server.log", filepath.Join("log", n.Name+".log")} {
		data, _ := os.ReadFile(filepath.Join(n.Dir, f))
		if len(data) > max {
			data = data[len(data)-max:]
		}
		fmt.Fprintf(&b, "%s %s (tail):\n%s\n", n.Name, f, data)
	}
	return b.String()
}

// RabbitScripts returns the directory of the installed rabbitmq-server
// scripts, past the wrapper on PATH that would switch to the rabbitmq user
// (and its cookie): the nodes run as the caller's user.
func RabbitScripts() (string, error) {
	p, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		return "", fmt.Errorf("rabbitmq-server must be installed: %w", err)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(real)
	for _, f := range []string{"rabbitmq-server", "rabbitmqctl", "rabbitmq-env"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("rabbitmq scripts directory %s: %w", dir, err)
		}
	}
	return dir, nil
}

// rabbitFreePort returns a loopback port nothing listens on now, outside
// the range the RabbitMQ CLI takes for its own distribution (35672-35682).
func rabbitFreePort() (int, error) {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if err := ln.Close(); err != nil {
			return 0, err
		}
		if port < 35600 || port > 35700 {
			return port, nil
		}
	}
}

func randomSuffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartRabbitNodes starts n RabbitMQ nodes under dir and joins them into one
// cluster (n > 1), waiting up to 4 minutes for them. The caller kills them
// (Kill) when done; on an error, the nodes started so far are killed
// already.
func StartRabbitNodes(ctx context.Context, dir string, n int) ([]*RabbitNode, error) {
	bin, err := RabbitScripts()
	if err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	cookie := "HERALDTEST" + strings.ToUpper(randomSuffix())
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(cookie), 0o400); err != nil {
		return nil, err
	}
	suffix := randomSuffix()
	var nodes []*RabbitNode
	fail := func(err error) ([]*RabbitNode, error) {
		for _, nd := range nodes {
			_ = nd.Kill()
		}
		return nil, err
	}
	for i := range n {
		nd := &RabbitNode{
			Name: fmt.Sprintf("rabbit-h%d-%s@localhost", i+1, suffix),
			Dir:  filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			home: home,
			bin:  bin,
		}
		if nd.AMQPPort, err = rabbitFreePort(); err != nil {
			return fail(err)
		}
		if nd.distPort, err = rabbitFreePort(); err != nil {
			return fail(err)
		}
		if err := os.MkdirAll(nd.Dir, 0o700); err != nil {
			return fail(err)
		}
		files := map[string]string{
			"rabbitmq.conf": fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", nd.AMQPPort),
			// The machine's env file sets its node name; this one only
			// keeps distribution on loopback.
			"rabbitmq-env.conf": fmt.Sprintf("ERL_EPMD_ADDRESS=127.0.0.1\nDIST_PORT=%d\n", nd.distPort) +
				`SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"` + "\n",
			"advanced.config": "[].\n",
			"enabled_plugins": "[].\n",
		}
		for f, body := range files {
			if err := os.WriteFile(filepath.Join(nd.Dir, f), []byte(body), 0o600); err != nil {
				return fail(err)
			}
		}
		if err := nd.start(); err != nil {
			return fail(err)
		}
		nodes = append(nodes, nd)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, nd := range nodes {
		wg.Go(func() {
			// A node that does not start says why in its own output.
			if err := nd.Wait(ctx, 4*time.Minute); err != nil {
				errs[i] = fmt.Errorf("%w\n%s", err, nd.LogTail(3000))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail(fmt.Errorf("nodes did not start: %w", err))
	}
	for _, nd := range nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", nodes[0].Name}, {"start_app"}} {
			if _, err := nd.Ctl(ctx, "rabbitmqctl", args...); err != nil {
				return fail(err)
			}
		}
	}
	return nodes, nil
}

// QueueLeader names the node that leads a quorum queue of vhost, asking via
// the given node, and the queue's members.
func QueueLeader(ctx context.Context, via *RabbitNode, vhost, queue string) (leader string, members []string, err error) {
	args := []string{"-q", "--formatter", "json", "list_queues"}
	if vhost != "" {
		args = append(args, "-p", vhost)
	}
	args = append(args, "name", "leader", "members")
	out, err := via.Ctl(ctx, "rabbitmqctl", args...)
	if err != nil {
		return "", nil, err
	}
	var qs []struct {
		Name    string   `json:"name"`
		Leader  string   `json:"leader"`
		Members []string `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		return "", nil, fmt.Errorf("list_queues: %w: %s", err, out)
	}
	for _, q := range qs {
		if q.Name == queue {
			return q.Leader, q.Members, nil
		}
	}
	return "", nil, fmt.Errorf("queue %s not found: %s", queue, out)
}
