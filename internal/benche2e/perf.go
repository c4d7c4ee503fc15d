package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// perfRecord is a system-wide `perf record` running over the measurement.
// System-wide, because the work is spread over several processes: the
// peers, the `true` processes they fork, the kernel (fork, exec, fsync).
// Other programs running on the machine show up under their own names.
type perfRecord struct {
	out  string
	cmd  *exec.Cmd
	done chan error
	logs bytes.Buffer
}

// perfFreq is the sampling frequency per CPU: enough samples for a
// breakdown in a few seconds, little overhead.
const (
	perfFreq = "499"
	perfHz   = 499.0
)

func startPerf(ctx context.Context, out string) (*perfRecord, error) {
	bin, err := exec.LookPath("perf")
	if err != nil {
		return nil, fmt.Errorf("--profile needs perf (apt-get install linux-perf): %w", err)
	}
	p := &perfRecord{out: out, done: make(chan error, 1)}
	// cpu-clock works in a VM without hardware counters; -g walks Go's
	// frame pointers.
	p.cmd = exec.Command(bin, "record", "-a", "-g", "-e", "cpu-clock", "-F", perfFreq, "-o", out)
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGINT}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start perf: %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	// perf needs a moment to open its events on every CPU.
	select {
	case err := <-p.done:
		return nil, fmt.Errorf("perf record exited at once: %v\n%s", err, p.logs.String())
	case <-time.After(500 * time.Millisecond):
	case <-ctx.Done():
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		<-p.done
		return nil, ctx.Err()
	}
	return p, nil
}

// stop ends perf (SIGINT makes it write its data) and waits for it; a
// second call does nothing.
func (p *perfRecord) stop() error {
	if p == nil || p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	var err error
	select {
	case err = <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		err = <-p.done
	}
	p.cmd = nil
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() <= 0) {
		return fmt.Errorf("perf record: %v\n%s", err, p.logs.String())
	}
	return nil
}

// report appends perf's summaries: CPU by command, then the peer's
// hottest functions by self time and by inclusive time. Percentages are
// of every sample of the machine (2 CPUs × the measurement), idle
// included (command "swapper").
func (p *perfRecord) report(ctx context.Context, w io.Writer, peerPIDs []int, tasks int) error {
	if p == nil {
		return nil
	}
	set := map[int]bool{}
	var pids []string
	for _, pid := range peerPIDs {
		set[pid] = true
		pids = append(pids, strconv.Itoa(pid))
	}
	b, err := p.breakdown(ctx, set)
	if err != nil {
		return err
	}
	b.write(w, tasks)
	pidList := strings.Join(pids, ",")
	runs := []struct {
		title string
		args  []string
		lines int
	}{
		{"CPU samples by command (whole machine; swapper = idle)", []string{"--no-children", "--sort", "comm", "--percent-limit", "0.5"}, 25},
		{"CPU samples by command and shared object", []string{"--no-children", "--sort", "comm,dso", "--percent-limit", "0.5"}, 30},
		{"the federation's peer processes: functions by self time (% of the machine)", []string{"--no-children", "--pid", pidList, "--sort", "sym", "--percent-limit", "0.3"}, 60},
		{"the federation's peer processes: functions by inclusive time (% of the machine)", []string{"--children", "--pid", pidList, "--sort", "sym", "--percent-limit", "1.5"}, 100},
	}
	for _, r := range runs {
		args := append([]string{"report", "-i", p.out, "--stdio", "-g", "none", "--quiet"}, r.args...)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		out, err := exec.CommandContext(cctx, "perf", args...).Output()
		cancel()
		if err != nil {
			return fmt.Errorf("perf %s: %w", strings.Join(args, " "), err)
		}
		fmt.Fprintf(w, "\n## %s\n\n```\n%s```\n", r.title, headLines(string(out), r.lines))
	}
	return nil
}

// headLines keeps the first n non-empty lines of s.
func headLines(s string, n int) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n == 0 {
			break
		}
		b.WriteString(strings.TrimRight(l, " ") + "\n")
		n--
	}
	return b.String()
}
