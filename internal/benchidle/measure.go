package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/internal/peerproc"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture Go supports (getconf CLK_TCK).
const clockTicks = 100

// procCPU is a process's CPU time (user + system) and resident set.
type procCPU struct {
	cpu time.Duration
	rss int64 // bytes
	// sleeps counts the times the process's threads blocked or slept
	// (voluntary context switches, summed over /proc/PID/task/*): each is
	// a wake-up later. Less sensitive to a loaded host than CPU time,
	// which contention inflates.
	sleeps int64
}

// voluntarySwitches sums voluntary_ctxt_switches over pid's threads.
func voluntarySwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				k, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += k
			}
		}
	}
	return n
}

// readProcStat reads /proc/PID/stat. Fields after the command name (which
// may hold spaces) are counted from its closing parenthesis: utime is the
// 14th field, stime the 15th, rss (pages) the 24th.
func readProcStat(pid int) (procCPU, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procCPU{}, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procCPU{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is the 3rd field (state).
	if len(fields) < 22 {
		return procCPU{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	rss, err3 := strconv.ParseInt(fields[21], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return procCPU{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return procCPU{cpu: time.Duration(utime+stime) * time.Second / clockTicks, rss: rss * int64(os.Getpagesize()),
		sleeps: voluntarySwitches(pid)}, nil
}

// result is one measurement.
type result struct {
	N      int
	Formed time.Duration
	// JoinRetries counts the joiners whose `peer run` exited and was
	// started again during formation.
	JoinRetries int
	Window      time.Duration
	// CPU shares of one core over the window.
	Leader    float64
	LeaderRSS int64
	Voters    []float64 // followers that vote
	NonVoters []float64
	Total     float64 // every peer process together
	// Wake-ups a second (voluntary context switches) over the window.
	LeaderWakeups   float64
	VoterWakeups    []float64
	NonVoterWakeups []float64
	LoadStart       string // /proc/loadavg at the window's start and end
	LoadEnd         string
	// Fail-over: kill -9 of the leader until a surviving voter says it
	// leads; and the new leader's log lines over the 10 s after.
	// LeaderChanged: the peer that led at the window's start did not at
	// its end (its figure then covers part of the window only).
	LeaderChanged bool
	FailoverMs    int64
	FailoverErr   string // why no fail-over was measured
	LogLines      int
	HeartbeatErr  int
}

// measureIdle reads every peer's CPU time at the start and the end of the
// window.
func (f *federation) measureIdle(ctx context.Context, window time.Duration, res *result) error {
	leader, voters, err := f.roles(ctx, f.peers[0])
	if err != nil {
		return err
	}
	before := make([]procCPU, len(f.peers))
	res.LoadStart = loadavg()
	for i, p := range f.peers {
		if before[i], err = readProcStat(p.proc.Cmd.Process.Pid); err != nil {
			return err
		}
	}
	if err := sleep(ctx, window); err != nil {
		return err
	}
	res.LoadEnd = loadavg()
	for i, p := range f.peers {
		after, err := readProcStat(p.proc.Cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("%s: %w", p.org, err)
		}
		pct := 100 * float64(after.cpu-before[i].cpu) / float64(window)
		wakeups := float64(after.sleeps-before[i].sleeps) / window.Seconds()
		res.Total += pct
		switch {
		case p == leader:
			res.Leader, res.LeaderRSS, res.LeaderWakeups = pct, after.rss, wakeups
		case voters[p.id]:
			res.Voters = append(res.Voters, pct)
			res.VoterWakeups = append(res.VoterWakeups, wakeups)
		default:
			res.NonVoters = append(res.NonVoters, pct)
			res.NonVoterWakeups = append(res.NonVoterWakeups, wakeups)
		}
	}
	if l2, _, err := f.roles(ctx, f.peers[0]); err != nil || l2 != leader {
		// Reported, not fatal: on a loaded host an election in the
		// window is part of what was measured.
		res.LeaderChanged = true
	}
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// profile records the leader (or the last non-voter) with perf
// (frame-pointer call graphs) for d and writes perf.txt: the functions by
// cumulative share (children) and by own share.
func (f *federation) profile(ctx context.Context, role string, d time.Duration, base string) error {
	leader, voters, err := f.roles(ctx, f.peers[0])
	if err != nil {
		return err
	}
	if role == "nonvoter" {
		for _, p := range f.peers {
			if !voters[p.id] {
				leader = p
			}
		}
	}
	data := base + ".data"
	secs := strconv.Itoa(int(d.Seconds()))
	rec := exec.CommandContext(ctx, "perf", "record", "-q", "-F", "499", "-g", "-p", strconv.Itoa(leader.proc.Cmd.Process.Pid), "-o", data, "--", "sleep", secs)
	if out, err := rec.CombinedOutput(); err != nil {
		return fmt.Errorf("perf record: %w\n%s", err, out)
	}
	txt := base + ".txt"
	out, err := os.Create(txt)
	if err != nil {
		return err
	}
	defer out.Close()
	for _, mode := range []string{"--children", "--no-children"} {
		fmt.Fprintf(out, "==== perf report %s --sort sym\n", mode)
		rep := exec.CommandContext(ctx, "perf", "report", "-i", data, "--stdio", mode, "--sort", "sym", "-g", "none", "--percent-limit", "0.5")
		rep.Stdout, rep.Stderr = out, io.Discard
		if err := rep.Run(); err != nil {
			return fmt.Errorf("perf report: %w", err)
		}
	}
	f.log.Info("profile", "file", txt, "role", role, "org", leader.org)
	return nil
}

// failover kills the leader with SIGKILL and polls every surviving voter
// until one says it leads; then it counts the lines the new leader logs
// over the next 10 s (how loudly it complains about the dead peer).
func (f *federation) failover(ctx context.Context, res *result) error {
	leader, voters, err := f.roles(ctx, f.peers[0])
	if err != nil {
		return err
	}
	var cands []*peerProc
	for _, p := range f.peers {
		if p != leader && voters[p.id] {
			cands = append(cands, p)
		}
	}
	killed := time.Now()
	if err := leader.proc.Kill9(); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	won := make(chan *peerProc, len(cands))
	var wg sync.WaitGroup
	for _, p := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pctx.Err() == nil {
				cctx, c := context.WithTimeout(pctx, time.Second)
				s, err := p.client.Status(cctx)
				c()
				if err == nil && s.Raft.State == "Leader" {
					won <- p
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	var next *peerProc
	select {
	case next = <-won:
		res.FailoverMs = time.Since(killed).Milliseconds()
	case <-pctx.Done():
		return errors.New("no surviving voter led within 30 s")
	}
	cancel()
	wg.Wait()
	st, err := os.Stat(next.proc.Stderr)
	if err != nil {
		return err
	}
	if err := sleep(ctx, 10*time.Second); err != nil {
		return err
	}
	tail := peerproc.ReadFile(next.proc.Stderr)
	if int64(len(tail)) >= st.Size() {
		tail = tail[st.Size():]
	}
	for _, line := range strings.Split(tail, "\n") {
		if line == "" {
			continue
		}
		res.LogLines++
		if strings.Contains(line, "failed to heartbeat") || strings.Contains(line, "failed to appendEntries") {
			res.HeartbeatErr++
		}
	}
	f.log.Info("fail-over", "from", leader.org, "to", next.org, "ms", res.FailoverMs, "log", filepath.Base(next.proc.Stderr))
	return nil
}

func stats(xs []float64) (mean, median, maxv float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	for _, x := range s {
		mean += x
	}
	return mean / float64(len(s)), s[len(s)/2], s[len(s)-1]
}

// print writes the result as a table and one RESULT line (key=value).
func (r result) print(w io.Writer) {
	vm, _, vx := stats(r.Voters)
	nm, nmed, nx := stats(r.NonVoters)
	fmt.Fprintf(w, "peers %d: formed in %.1f s (%d joins retried); idle window %s (load %s -> %s)\n", r.N, r.Formed.Seconds(), r.JoinRetries, r.Window, r.LoadStart, r.LoadEnd)
	fmt.Fprintf(w, "  leader              %6.2f %% of a core (RSS %d MiB)\n", r.Leader, r.LeaderRSS>>20)
	if r.LeaderChanged {
		fmt.Fprintln(w, "  (the leader changed during the window: an election happened while idle)")
	}
	fmt.Fprintf(w, "  voters (%3d)        mean %5.2f %%  max %5.2f %%\n", len(r.Voters), vm, vx)
	fmt.Fprintf(w, "  non-voters (%3d)    mean %5.2f %%  median %5.2f %%  max %5.2f %%\n", len(r.NonVoters), nm, nmed, nx)
	fmt.Fprintf(w, "  all peers together  %6.2f %% of a core\n", r.Total)
	vw, _, _ := stats(r.VoterWakeups)
	nw, _, _ := stats(r.NonVoterWakeups)
	fmt.Fprintf(w, "  wake-ups a second   leader %.0f, voters mean %.0f, non-voters mean %.0f\n", r.LeaderWakeups, vw, nw)
	if r.FailoverMs > 0 {
		fmt.Fprintf(w, "  fail-over           %d ms (kill -9 of the leader to a voter leading); new leader's log: %d lines in 10 s, %d about failed heartbeats or appends\n", r.FailoverMs, r.LogLines, r.HeartbeatErr)
	}
	r.printGoals(w, max(vx, nx))
	fmt.Fprintf(w, "RESULT n=%d formed_s=%.1f join_retries=%d window_s=%.0f leader_changed=%t leader_pct=%.2f voter_mean_pct=%.2f voter_max_pct=%.2f nonvoter_mean_pct=%.2f nonvoter_max_pct=%.2f total_pct=%.1f leader_wakeups=%.0f voter_wakeups=%.0f nonvoter_wakeups=%.0f failover_ms=%d log_lines_10s=%d heartbeat_err_lines_10s=%d\n",
		r.N, r.Formed.Seconds(), r.JoinRetries, r.Window.Seconds(), r.LeaderChanged, r.Leader, vm, vx, nm, nx, r.Total, r.LeaderWakeups, vw, nw, r.FailoverMs, r.LogLines, r.HeartbeatErr)
}

// Issue 17's goals for an idle federation (at 100 peers on one host).
const (
	goalFormed      = 60 * time.Second
	goalLeaderPct   = 5.0
	goalFollowerPct = 0.5
	goalFailoverMs  = 1500
)

// printGoals writes one GOAL line per goal of issue 17, with this run's
// figure and whether it meets it; followerMax is the busiest follower.
func (r result) printGoals(w io.Writer, followerMax float64) {
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	fmt.Fprintf(w, "GOAL formed <= %.0f s: %.1f s: %s\n", goalFormed.Seconds(), r.Formed.Seconds(), verdict(r.Formed <= goalFormed))
	fmt.Fprintf(w, "GOAL leader <= %.1f %% of a core: %.2f %%: %s\n", goalLeaderPct, r.Leader, verdict(r.Leader <= goalLeaderPct && !r.LeaderChanged))
	fmt.Fprintf(w, "GOAL each follower <= %.1f %% of a core: busiest %.2f %%: %s\n", goalFollowerPct, followerMax, verdict(followerMax <= goalFollowerPct))
	if r.FailoverErr != "" {
		fmt.Fprintf(w, "GOAL fail-over <= %d ms: %s: NOT met\n", goalFailoverMs, r.FailoverErr)
	} else if r.FailoverMs > 0 {
		fmt.Fprintf(w, "GOAL fail-over <= %d ms: %d ms: %s\n", goalFailoverMs, r.FailoverMs, verdict(r.FailoverMs <= goalFailoverMs))
	} else {
		fmt.Fprintln(w, "GOAL fail-over: not measured")
	}
	if r.N < 100 {
		fmt.Fprintf(w, "(the goals are for 100 peers; this run has %d)\n", r.N)
	}
}
