package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A category of CPU samples: the first rule (in order) one of whose
// patterns occurs in a sample's call chain names it. The order puts the
// narrow causes (an fsync, a fork) before the layers they run under (raft,
// the executor), so that each sample counts once, under its most specific
// cause.
type category struct {
	Name     string
	Patterns []string
}

var peerCategories = []category{
	{"fsync (Raft log in bolt, run journal, files)", []string{"do_fsync", "__x64_sys_fdatasync", "__x64_sys_fsync", "ext4_sync_file"}},
	{"process start: fork/exec of the task (executor)", []string{"syscall.forkExec", "syscall.forkAndExecInChild", "os.StartProcess", "__x64_sys_execve", "kernel_clone", "__do_sys_clone"}},
	{"node: checkpoint GC (poked at every task end)", []string{"coopgrid/node.(*checkpoints).gc"}},
	{"executor: task directories (prepareDirs)", []string{"coopgrid/executor.(*ProcessExecutor).prepareDirs"}},
	{"executor: stdout/stderr capture files", []string{"coopgrid/executor.newCapture", "coopgrid/executor.(*capture)"}},
	{"executor: run journal (without fsync)", []string{"coopgrid/executor.(*runJournal)"}},
	{"executor: reaping, /proc scan of the group", []string{"coopgrid/executor.killGroup", "coopgrid/executor.groupAlive"}},
	{"executor: other", []string{"coopgrid/executor."}},
	{"ledger: Apply (decoding included)", []string{"coopgrid/ledger.(*Ledger).Apply"}},
	{"ledger: state hash", []string{"coopgrid/ledger.(*Ledger).Hash"}},
	{"ledger: views (Allocations, PolicyView, lists)", []string{"coopgrid/ledger."}},
	{"policy pass", []string{"coopgrid/policy."}},
	{"raft (replication, log cache, FSM dispatch)", []string{"hashicorp/raft"}},
	{"bolt (without fsync)", []string{"go.etcd.io/bbolt"}},
	{"node: executor bridge", []string{"coopgrid/node.(*bridge)"}},
	{"node: other (heartbeats, files, backend)", []string{"coopgrid/node."}},
	{"consensus: propose, forward, subscriptions", []string{"coopgrid/consensus."}},
	{"HTTP API", []string{"coopgrid/api.", "net/http."}},
	{"libp2p, gossip, streams", []string{"libp2p", "multiformats", "quic-go", "yamux"}},
	{"Go GC (background marking)", []string{"runtime.gcBgMarkWorker"}},
	{"Go scheduler, timers, netpoll", []string{"runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.mcall", "runtime.sysmon", "runtime.netpoll"}},
}

// catCount is one category's samples.
type catCount struct {
	Name    string
	Samples int
}

// perfBreakdown tallies perf script's samples: those of the peers' pids by
// category, those of the processes they forked (the tasks) by command,
// the rest by command.
type perfBreakdown struct {
	Total     int
	Peers     int
	Tasks     int
	ByCat     map[string]int
	ByTask    map[string]int
	ByCommand map[string]int
}

// categorize reads `perf script --show-task-events -F comm,pid,tid,ip,sym`
// output: per sample a header line "comm pid/tid" and the call chain, one
// frame a line; task events on one line each. The fork events
// ("PERF_RECORD_FORK(child:tid):(parent:tid)") tell which processes the
// peers forked (the tasks: before exec, the executor's gate shell, `true`).
func categorize(r io.Reader, peerPIDs map[int]bool) (*perfBreakdown, error) {
	b := &perfBreakdown{ByCat: map[string]int{}, ByTask: map[string]int{}, ByCommand: map[string]int{}}
	children := map[int]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var (
		comm  string
		pid   int
		stack []string
		open  bool
	)
	flush := func() {
		if !open {
			return
		}
		open = false
		b.Total++
		if children[pid] {
			b.Tasks++
			b.ByTask[comm]++
			return
		}
		if !peerPIDs[pid] {
			b.ByCommand[comm]++
			return
		}
		b.Peers++
		b.ByCat[categoryOf(stack)]++
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if i := strings.Index(line, "PERF_RECORD_FORK("); i >= 0 {
			flush()
			child, parent, ok := parseFork(line[i:])
			if ok && child != parent && (peerPIDs[parent] || children[parent]) {
				children[child] = true
			}
			continue
		}
		if strings.Contains(line, "PERF_RECORD_") {
			flush()
			continue
		}
		if !strings.HasPrefix(line, "\t") {
			// A header: frames are indented with a tab.
			flush()
			comm, pid = parseHeader(line)
			stack = stack[:0]
			open = true
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 {
			stack = append(stack, strings.Join(f[1:], " "))
		}
	}
	flush()
	return b, sc.Err()
}

// parseFork reads "PERF_RECORD_FORK(child:tid):(parent:tid)"; a new
// thread has the same pid as its parent.
func parseFork(s string) (child, parent int, ok bool) {
	var ct, pt int
	if _, err := fmt.Sscanf(s, "PERF_RECORD_FORK(%d:%d):(%d:%d)", &child, &ct, &parent, &pt); err != nil {
		return 0, 0, false
	}
	return child, parent, true
}

// parseHeader splits "comm pid/tid" (the comm may hold spaces).
func parseHeader(line string) (string, int) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return strings.TrimSpace(line), -1
	}
	pt := f[len(f)-1]
	p, _, _ := strings.Cut(pt, "/")
	pid, err := strconv.Atoi(p)
	if err != nil {
		pid = -1
	}
	return strings.Join(f[:len(f)-1], " "), pid
}

func categoryOf(stack []string) string {
	for _, c := range peerCategories {
		for _, p := range c.Patterns {
			for _, fr := range stack {
				if strings.Contains(fr, p) {
					return c.Name
				}
			}
		}
	}
	return "other (runtime, syscalls, allocation outside the above)"
}

// breakdown runs perf script over the record and tallies it.
func (p *perfRecord) breakdown(ctx context.Context, peerPIDs map[int]bool) (*perfBreakdown, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "perf", "script", "-i", p.out, "--show-task-events", "-F", "comm,pid,tid,ip,sym")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	b, perr := categorize(out, peerPIDs)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	return b, perr
}

// write prints the tally as tables, and the CPU time per task: each
// cpu-clock sample stands for 1/perfFreq s of one CPU.
func (b *perfBreakdown) write(w io.Writer, tasks int) {
	sorted := func(m map[string]int) []catCount {
		var out []catCount
		for k, v := range m {
			out = append(out, catCount{k, v})
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].Samples != out[j].Samples {
				return out[i].Samples > out[j].Samples
			}
			return out[i].Name < out[j].Name
		})
		return out
	}
	fmt.Fprintf(w, "\n## CPU of the federation's peer processes, by activity\n\n")
	fmt.Fprintf(w, "%d samples in all (every CPU, idle included); the peers' processes took %d (%.1f %% of the machine).\n\n", b.Total, b.Peers, pct(int64(b.Peers), int64(b.Total)))
	if tasks > 0 {
		perTask := func(samples int) float64 { return float64(samples) / perfHz / float64(tasks) * 1000 }
		fmt.Fprintf(w, "CPU time per task: %.2f ms in the peers, %.2f ms in the processes they forked (fork, gate shell, `true`), %.2f ms together.\n\n",
			perTask(b.Peers), perTask(b.Tasks), perTask(b.Peers+b.Tasks))
	}
	fmt.Fprintf(w, "| activity (first match in the call chain) | share of the peers' CPU | share of the machine |\n|---|---|---|\n")
	for _, c := range sorted(b.ByCat) {
		fmt.Fprintf(w, "| %s | %.1f %% | %.1f %% |\n", c.Name, pct(int64(c.Samples), int64(b.Peers)), pct(int64(c.Samples), int64(b.Total)))
	}
	fmt.Fprintf(w, "\nThe processes the peers forked (the tasks), by command at the time of the sample: %.1f %% of the machine.\n\n| command | share of the machine |\n|---|---|\n", pct(int64(b.Tasks), int64(b.Total)))
	taskNames := map[string]string{
		"peer": "peer (a forked child before its exec)",
		"sh":   "sh (the executor's start gate)",
		"true": "true (the task)",
	}
	for _, c := range sorted(b.ByTask) {
		name := c.Name
		if n, ok := taskNames[name]; ok {
			name = n
		}
		fmt.Fprintf(w, "| %s | %.1f %% |\n", name, pct(int64(c.Samples), int64(b.Total)))
	}
	fmt.Fprintf(w, "\nEverything else on the machine, by command (swapper is idle; other programs ran on the shared machine):\n\n| command | share of the machine |\n|---|---|\n")
	for i, c := range sorted(b.ByCommand) {
		if i == 12 {
			break
		}
		fmt.Fprintf(w, "| %s | %.1f %% |\n", c.Name, pct(int64(c.Samples), int64(b.Total)))
	}
}
