package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
)

// The timeline is read from a stopped peer's Raft log (DATA/raft/raft.db):
// every command carries its proposer's clock (Command.AtMs) and every entry
// the time the leader appended it (raft.Log.AppendedAt). All peers run on
// this one machine, so the clocks agree. The log is replayed into a fresh
// ledger, which gives the task IDs of each submission, checks the
// invariants and gives the state hash to compare with the live peers'.

// logEntry is one command entry of the log.
type logEntry struct {
	Index    uint64
	Appended time.Time
	Cmd      ledger.Command
	Res      ledger.Result
}

// replay is the log of one data directory, applied to a fresh ledger.
type replay struct {
	Entries []logEntry
	// FromSnapshot is the index of the snapshot the replay started from
	// (0: the log was complete from index 1).
	FromSnapshot uint64
	Ledger       *ledger.Ledger
	// HashAt is the state hash once the ledger had applied index CheckAt
	// ("" if the log never reached it).
	CheckAt uint64
	HashAt  string
}

// readLog opens raft.db of a stopped peer's data directory read-only and
// replays it, noting the state hash at index checkAt (the peers go on
// writing after the measurement: a peer that stops declares its machines
// lost). A log compacted by a snapshot is replayed from the latest
// snapshot it continues.
func readLog(dataDir string, checkAt uint64) (*replay, error) {
	dir := filepath.Join(dataDir, "raft")
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(dir, consensus.RaftDBFile),
		BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: 10 * time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", filepath.Join(dir, consensus.RaftDBFile), err)
	}
	defer store.Close()
	first, err := store.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := store.LastIndex()
	if err != nil {
		return nil, err
	}
	r := &replay{Ledger: ledger.New(), CheckAt: checkAt}
	if first > 1 {
		if err := r.restore(dir, first); err != nil {
			return nil, err
		}
		if r.FromSnapshot > checkAt {
			return nil, fmt.Errorf("the log was compacted past index %d (snapshot at %d): cannot check the hash", checkAt, r.FromSnapshot)
		}
	}
	for i := first; i <= last && i > 0; i++ {
		var e raft.Log
		if err := store.GetLog(i, &e); err != nil {
			return nil, fmt.Errorf("log entry %d: %w", i, err)
		}
		if e.Type != raft.LogCommand || e.Index <= r.FromSnapshot {
			continue
		}
		c, err := ledger.DecodeCommand(e.Data)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", e.Index, err)
		}
		res := r.Ledger.Apply(e.Index, e.Data)
		r.Entries = append(r.Entries, logEntry{Index: e.Index, Appended: e.AppendedAt, Cmd: c, Res: res})
		if e.Index == checkAt {
			r.HashAt = r.Ledger.Hash()
		}
	}
	if r.FromSnapshot == checkAt && checkAt > 0 {
		r.HashAt = r.Ledger.Hash()
	}
	return r, nil
}

// restore loads the newest snapshot that the log continues (its index at
// least first-1).
func (r *replay) restore(dir string, first uint64) error {
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		return err
	}
	metas, err := snaps.List()
	if err != nil {
		return err
	}
	for _, m := range metas { // newest first
		if m.Index+1 < first {
			continue
		}
		_, rc, err := snaps.Open(m.ID)
		if err != nil {
			return err
		}
		err = r.Ledger.Restore(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("restore snapshot %s: %w", m.ID, err)
		}
		r.FromSnapshot = m.Index
		return nil
	}
	return fmt.Errorf("the log starts at %d and no snapshot continues it", first)
}

// taskTimes is one task's path through the log, in Unix ms (proposer's
// clock for "At", the leader's append for "App"; 0 when not in the log).
type taskTimes struct {
	Machine                string
	SubmitAt, SubmitApp    int64
	DecideAt, DecideApp    int64
	DecisionsInPass        int
	StartAt, StartApp      int64
	EndAt, EndApp          int64
	StartLogged, EndLogged int64 // from the peers' info logs, if read
	// From the executors' run journals, in µs, if read.
	SpawnUs, ReapUs, GoneUs int64
}

// timeline is the per-task and per-entry view of one run.
type timeline struct {
	Tasks map[string]*taskTimes
	// Kinds counts the command entries by kind during the run, and
	// Decisions the accepted allocations.
	Kinds       map[ledger.Kind]int
	Passes      int
	Allocations int
	// ReportItems counts the applied items of reports batches.
	ReportItems int
	// Forwarded counts the entries proposed by a peer other than leader
	// (buildTimeline's argument): each was a request forwarded to it.
	Forwarded    int
	Rejected     int
	FirstSubmit  int64
	LastEndApp   int64
	FromSnapshot uint64
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// buildTimeline indexes the entries of the measurement: appended (or
// proposed) at or after since and appended at or before until (Unix ms;
// 0: no end). Entries after the measurement, such as the machines a
// stopping peer declares lost, are left out. leader is the peer ID of the
// leader whose log r is: an entry another peer proposed was forwarded.
func buildTimeline(r *replay, since, until int64, leader string) *timeline {
	tl := &timeline{Tasks: map[string]*taskTimes{}, Kinds: map[ledger.Kind]int{}, FromSnapshot: r.FromSnapshot}
	get := func(id string) *taskTimes {
		t := tl.Tasks[id]
		if t == nil {
			t = &taskTimes{}
			tl.Tasks[id] = t
		}
		return t
	}
	for _, e := range r.Entries {
		app := ms(e.Appended)
		if app < since && e.Cmd.AtMs < since || until > 0 && app > until {
			continue
		}
		k := e.Cmd.Kind()
		tl.Kinds[k]++
		if leader != "" && e.Cmd.Peer != leader {
			tl.Forwarded++
		}
		switch k {
		case ledger.KindSubmitTasks:
			for _, id := range e.Res.TaskIDs {
				t := get(id)
				t.SubmitAt, t.SubmitApp = e.Cmd.AtMs, app
			}
			if tl.FirstSubmit == 0 || e.Cmd.AtMs < tl.FirstSubmit {
				tl.FirstSubmit = e.Cmd.AtMs
			}
		case ledger.KindDecisions, ledger.KindSchedule:
			// A trigger's decisions are the ones its Apply made.
			tl.Passes++
			ds := e.Res.Decisions
			for _, dr := range ds {
				if dr.Err != nil {
					tl.Rejected++
					continue
				}
				d := dr.Decision
				tl.Allocations++
				t := get(d.Task)
				t.Machine, t.DecideAt, t.DecideApp, t.DecisionsInPass = d.Machine, e.Cmd.AtMs, app, len(ds)
			}
		case ledger.KindTaskStarted, ledger.KindTaskEnded:
			tl.addReport(e.Cmd, app)
		case ledger.KindReports:
			// A batch of reports: each applied item counts as if
			// proposed at the batch's time.
			for i, it := range e.Cmd.Reports.Items {
				if i < len(e.Res.Reports) && e.Res.Reports[i].Err != nil {
					continue
				}
				tl.ReportItems++
				tl.addReport(it.Command(e.Cmd), app)
			}
		}
	}
	return tl
}

// addReport records a single task_started or task_ended command.
func (tl *timeline) addReport(c ledger.Command, app int64) {
	get := func(id string) *taskTimes {
		t := tl.Tasks[id]
		if t == nil {
			t = &taskTimes{}
			tl.Tasks[id] = t
		}
		return t
	}
	switch {
	case c.TaskStarted != nil:
		t := get(c.TaskStarted.Task)
		t.StartAt, t.StartApp = c.AtMs, app
	case c.TaskEnded != nil:
		t := get(c.TaskEnded.Task)
		t.EndAt, t.EndApp = c.AtMs, app
		tl.LastEndApp = max(tl.LastEndApp, app)
	}
}

// phase is one step of a task's path, measured between two timestamps.
type phase struct {
	Name string
	What string
	From func(prev, t *taskTimes) int64
	To   func(t *taskTimes) int64
}

// machinePhases split a machine's time between consecutive tasks: each
// task's steps from the moment its machine became free (the previous
// task's end appended; for a machine's first task, its submission
// appended) to the moment its own end was appended. Summed over a
// machine's tasks they cover its whole time in the run.
var machinePhases = []phase{
	{"free → decided", "machine free (previous end report appended) → the leader's pass that places the next task (decisions command's time): commit + apply of the end report, scheduler wake-up (debounce), policy pass",
		func(prev, t *taskTimes) int64 {
			if prev == nil {
				return t.SubmitApp
			}
			return prev.EndApp
		}, func(t *taskTimes) int64 { return t.DecideAt }},
	{"decided → appended", "decisions command built → appended to the leader's log",
		func(_, t *taskTimes) int64 { return t.DecideAt }, func(t *taskTimes) int64 { return t.DecideApp }},
	{"appended → start proposed", "decisions entry appended → the owner proposes TaskStarted: commit + apply of the decisions, subscription wake-up, reconcile, executor start (fork/exec of `true`)",
		func(_, t *taskTimes) int64 { return t.DecideApp }, func(t *taskTimes) int64 { return t.StartAt }},
	{"start proposed → end proposed", "TaskStarted proposed → TaskEnded proposed: the start report's commit (the end report waits for it), the process, the executor's result, output shipping",
		func(_, t *taskTimes) int64 { return t.StartAt }, func(t *taskTimes) int64 { return t.EndAt }},
	{"end proposed → appended", "TaskEnded proposed → appended by the leader (forwarding from a follower, the leader's apply queue)",
		func(_, t *taskTimes) int64 { return t.EndAt }, func(t *taskTimes) int64 { return t.EndApp }},
}

// stats is a summary of durations in ms.
type stats struct {
	N                   int
	Sum                 int64
	Mean, P50, P90, Max float64
}

func summarize(xs []int64) stats {
	if len(xs) == 0 {
		return stats{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum int64
	for _, x := range s {
		sum += x
	}
	q := func(p float64) float64 { return float64(s[int(p*float64(len(s)-1)+0.5)]) }
	return stats{N: len(s), Sum: sum, Mean: float64(sum) / float64(len(s)), P50: q(0.5), P90: q(0.9), Max: float64(s[len(s)-1])}
}

// complete reports whether the task has every timestamp of the log.
func (t *taskTimes) complete() bool {
	return t.SubmitApp > 0 && t.DecideAt > 0 && t.DecideApp > 0 && t.StartAt > 0 && t.EndAt > 0 && t.EndApp > 0
}

// report writes the breakdown: entries, per-phase durations, and the share
// of machine time each phase takes.
func (tl *timeline) report(w io.Writer, machines int) {
	var ids []string
	incomplete := 0
	for id, t := range tl.Tasks {
		if t.complete() {
			ids = append(ids, id)
		} else {
			incomplete++
		}
	}
	byMachine := map[string][]*taskTimes{}
	for _, id := range ids {
		t := tl.Tasks[id]
		byMachine[t.Machine] = append(byMachine[t.Machine], t)
	}
	durs := make([][]int64, len(machinePhases))
	var first []int64
	for _, ts := range byMachine {
		sort.Slice(ts, func(i, j int) bool { return ts[i].DecideAt < ts[j].DecideAt })
		for i, t := range ts {
			var prev *taskTimes
			if i > 0 {
				prev = ts[i-1]
			}
			for k, ph := range machinePhases {
				if k == 0 && prev == nil {
					first = append(first, ph.To(t)-ph.From(nil, t))
					continue
				}
				durs[k] = append(durs[k], ph.To(t)-ph.From(prev, t))
			}
		}
	}
	span := tl.LastEndApp - tl.FirstSubmit
	fmt.Fprintf(w, "log: %d tasks with a complete path (%d incomplete), %d machines used, span %d ms (first submission → last end appended)",
		len(ids), incomplete, len(byMachine), span)
	if tl.FromSnapshot > 0 {
		fmt.Fprintf(w, ", replayed from the snapshot at %d", tl.FromSnapshot)
	}
	fmt.Fprintln(w)
	var kinds []string
	total := 0
	for k, n := range tl.Kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "entries during the run: %d (%s); %d scheduling passes placed %d tasks (%.1f per pass), %d decisions rejected\n",
		total, strings.Join(kinds, ", "), tl.Passes, tl.Allocations, float64(tl.Allocations)/float64(max(tl.Passes, 1)), tl.Rejected)
	if n := tl.Kinds[ledger.KindReports]; n > 0 {
		fmt.Fprintf(w, "reports batches: %d entries carrying %d reports (%.1f per batch); a batched report counts as proposed at the batch's time\n",
			n, tl.ReportItems, float64(tl.ReportItems)/float64(n))
	}
	if span > 0 {
		fmt.Fprintf(w, "log entries per second: %.0f\n", float64(total)*1000/float64(span))
	}
	if n := len(tl.Tasks); n > 0 {
		fmt.Fprintf(w, "per task: %.2f entries, %.2f of them proposed by another peer than the leader (forwarded requests)\n",
			float64(total)/float64(n), float64(tl.Forwarded)/float64(n))
	}
	fmt.Fprintf(w, "\n| phase (ms) | n | mean | p50 | p90 | max | share of machine time |\n|---|---|---|---|---|---|---|\n")
	var machineTime int64
	for _, d := range durs {
		machineTime += summarize(d).Sum
	}
	fs := summarize(first)
	machineTime += fs.Sum
	fmt.Fprintf(w, "| submitted → first decision (a machine's first task) | %d | %.1f | %.0f | %.0f | %.0f | %.1f %% |\n",
		fs.N, fs.Mean, fs.P50, fs.P90, fs.Max, pct(fs.Sum, machineTime))
	for k, ph := range machinePhases {
		s := summarize(durs[k])
		fmt.Fprintf(w, "| %s | %d | %.1f | %.0f | %.0f | %.0f | %.1f %% |\n", ph.Name, s.N, s.Mean, s.P50, s.P90, s.Max, pct(s.Sum, machineTime))
	}
	if machines > 0 && span > 0 {
		fmt.Fprintf(w, "\nmachine time accounted: %d ms of %d machines × %d ms span = %.1f %%\n",
			machineTime, machines, span, pct(machineTime, int64(machines)*span))
	}
	// Queueing of the decisions themselves.
	var pass []int64
	for _, id := range ids {
		pass = append(pass, int64(tl.Tasks[id].DecisionsInPass))
	}
	ps := summarize(pass)
	fmt.Fprintf(w, "decisions in the pass that placed a task: mean %.1f, p50 %.0f, max %.0f\n", ps.Mean, ps.P50, ps.Max)
	fmt.Fprintln(w)
	for _, ph := range machinePhases {
		fmt.Fprintf(w, "- %s: %s\n", ph.Name, ph.What)
	}
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
