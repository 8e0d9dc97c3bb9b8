package raw

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heraldhq/herald/internal/bench"
)

// CPUClock is the CPU time spent so far, read from Linux's /proc: by this
// process (herald's api, relay and worker, and the bench's own clients and
// sink, which run in it), by the database server's processes and the
// broker's on this machine, and by the whole machine. Two readings
// subtracted give the CPU split of a span (Sub).
type CPUClock struct {
	Self, Busy, Total time.Duration
	// database and broker are the CPU time of each such process, by pid
	// (a postmaster's includes its exited children's): Sub counts a
	// process only from its first reading, so one that restarted during
	// the span (a broker stopped by hand) does not count negative.
	database, broker map[int]time.Duration
}

// Sub is the split of the span from c0 to c: Herald is this process,
// Database the server processes named database (postgres: every backend,
// and through the postmaster's children's times the backends that exited
// during the span), Broker the broker's processes (RabbitMQ's beam.smp,
// nats-server), Other the rest of the machine's busy time.
func (c CPUClock) Sub(c0 CPUClock) bench.CPUSplit {
	since := func(now, before map[int]time.Duration) time.Duration {
		var d time.Duration
		for pid, t := range now {
			if t0, ok := before[pid]; ok && t0 <= t {
				d += t - t0
			} else if !ok {
				d += t // started during the span
			}
		}
		return d
	}
	s := bench.CPUSplit{
		Herald:   c.Self - c0.Self,
		Database: since(c.database, c0.database),
		Broker:   since(c.broker, c0.broker),
	}
	busy := c.Busy - c0.Busy
	s.Other = max(busy-s.Herald-s.Database-s.Broker, 0)
	if total := c.Total - c0.Total; total > 0 {
		s.Busy = float64(busy) / float64(total)
	}
	return s
}

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// port the bench runs on).
const clockTick = 10 * time.Millisecond

// ReadCPUClock reads the clock. database names the database server's
// processes (their command name: "postgres"); "" counts none. It fails
// where /proc is missing (not Linux).
func ReadCPUClock(database string) (CPUClock, error) {
	var c CPUClock
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return c, fmt.Errorf("cpu clock: %w", err)
	}
	c.Self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	busy, total, err := machineCPU()
	if err != nil {
		return c, err
	}
	c.Busy, c.Total = busy, total
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return c, fmt.Errorf("cpu clock: %w", err)
	}
	type proc struct {
		comm          string
		ppid          int
		own, children time.Duration
	}
	all := map[int]proc{}
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		comm, fields, ok := parseStat(string(b))
		if !ok || len(fields) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		ticks := func(i int) time.Duration {
			n, _ := strconv.ParseInt(fields[i], 10, 64)
			return time.Duration(n) * clockTick
		}
		all[pid] = proc{comm: comm, ppid: ppid, own: ticks(11) + ticks(12), children: ticks(13) + ticks(14)}
	}
	c.database, c.broker = map[int]time.Duration{}, map[int]time.Duration{}
	for pid, p := range all {
		switch {
		case database != "" && p.comm == database:
			c.database[pid] = p.own
			// The postmaster (whose parent is no database process)
			// holds the times of its children that exited.
			if all[p.ppid].comm != database {
				c.database[pid] += p.children
			}
		case p.comm == "beam.smp" || p.comm == "nats-server":
			c.broker[pid] = p.own
		}
	}
	return c, nil
}

// parseStat splits /proc/PID/stat into the command name and the fields
// after it (fields[0] is the state; the command may hold spaces and
// parentheses, so it is cut at the last ')').
func parseStat(s string) (comm string, fields []string, ok bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 > len(s) {
		return "", nil, false
	}
	return s[open+1 : end], strings.Fields(s[end+2:]), true
}

// machineCPU reads the machine's busy and total CPU time from /proc/stat.
func machineCPU() (busy, total time.Duration, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("cpu clock: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0, errors.New("cpu clock: /proc/stat is empty")
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("cpu clock: unexpected /proc/stat line %q", sc.Text())
	}
	// user nice system idle iowait irq softirq steal
	for i, f := range fields[1:9] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("cpu clock: /proc/stat: %w", err)
		}
		d := time.Duration(n) * clockTick
		total += d
		if i != 3 && i != 4 { // idle, iowait
			busy += d
		}
	}
	return busy, total, nil
}
