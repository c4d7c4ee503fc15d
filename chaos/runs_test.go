package chaos

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/executor"
)

// The run check compares the ledger's segments with the executors' own
// records: each peer's run journal (DATA/runs.jsonl, docs/EXECUTOR.md),
// which the process executor fsyncs before the daemon can report a start
// and after the process group is gone. Definitions (docs/RELIABILITY.md,
// "No task ran twice at once"):
//
//   - A journal run's interval is [start, end]: start is taken just before
//     the spawn; end is when the process group was found empty, or, for a
//     run its daemon died with (kill -9), when its supervisor found it
//     over (its end marker, which the next boot journals once that
//     supervisor is gone), else that boot (an upper bound); a run still
//     open when its peer stopped has no end (+∞). Runs that spawned no
//     process, or whose gate never opened (NotRun: the ledger refused the
//     start, so the task itself never ran), have no interval.
//   - Two runs of one task overlap when the later starts before the
//     earlier ends. An overlap is allowed only when the earlier run is one
//     the ledger took the task away from by asking its peer to stop it:
//     its segment was closed `preempted` or `cancelled` (the process may
//     outlive that decision by the stop grace), or the ledger
//     never recorded it (no segment: its start report was refused or never
//     committed, because the ledger had already placed the task elsewhere;
//     the executing peer stops such a run as soon as it learns it). A run
//     whose machine was declared `lost` gets no allowance (issue 16): its
//     peer holds a lease on it, and a peer paused or cut off longer than
//     the lease has its supervisor kill the run before the heartbeat
//     timeout lets the leader place the task again; a daemon killed with
//     kill -9 has its supervisors kill its runs at once, and the next
//     boot journals that time — also for a run that had ended by itself
//     before the daemon could journal it (a make chaos once saw such a run
//     journaled at the next boot, 0.7 s after the task ran elsewhere: its
//     supervisor marked only the runs it killed).
//     A run that ends by itself while its peer
//     is paused is journaled as ended when its supervisor found it gone
//     (the peer used to journal when it noticed, after the pause, which
//     this check took for an overlap with the run placed meanwhile).
//   - Every ledger segment must match a journal run of the same task on
//     the same machine (the journal of the machine's organisation): in
//     order, and, on a peer whose clock the scenario does not step, with
//     a journal start no later than the segment's start (the owner stamps
//     task_started after the executor journaled the start, on the same
//     host clock). A segment closed `done` matches a run that ended `ok`;
//     one closed by its owner's report (done, failed, preempted,
//     cancelled) matches a run whose end is journaled. Since the start
//     record is durable before the start can be reported, a peer killed
//     with kill -9 loses no matchable record: the check allows no
//     exception for killed peers.

// peerJournal is one peer's journal: its organisation and runs.
type peerJournal struct {
	org  string
	runs []executor.JournalRun
}

// runsReport is what checkRuns found.
type runsReport struct {
	runs, processes, abandoned, open, noProcess int
	matched, unrecorded                         int
	// overlaps by why they are allowed ("preempted", "cancelled",
	// "unrecorded"); longest is the longest overlap seen.
	overlaps map[string]int
	longest  time.Duration
	errs     []string
}

func (r runsReport) String() string {
	var kinds []string
	for k, n := range r.overlaps {
		kinds = append(kinds, fmt.Sprintf("%d after %s", n, k))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("%d journal runs (%d processes, %d abandoned by a killed daemon, %d still open, %d without a process), %d matched to ledger segments, %d the ledger never recorded; overlaps: %d allowed (%s), longest %v; %d violations",
		r.runs, r.processes, r.abandoned, r.open, r.noProcess, r.matched, r.unrecorded, r.allowedOverlaps(), strings.Join(kinds, ", "), r.longest.Round(time.Millisecond), len(r.errs))
}

func (r runsReport) allowedOverlaps() int {
	n := 0
	for _, k := range r.overlaps {
		n += k
	}
	return n
}

// jrun is a journal run with its ledger machine ID.
type jrun struct {
	executor.JournalRun
	machine string // <org>/<name>
	// seg is the index of the matched ledger segment in the task's
	// segments, -1 when none.
	seg int
}

func (r *jrun) endUs() int64 {
	if r.Open() {
		return math.MaxInt64
	}
	return r.EndUs
}

// checkRuns checks details (the healed federation's tasks) against the
// journals. skewed says the scenario stepped peers' clocks: segment
// stamps are then not comparable with journal times and runs are matched
// by order only.
func checkRuns(details []api.TaskDetail, journals []peerJournal, skewed bool) runsReport {
	rep := runsReport{overlaps: map[string]int{}}
	fail := func(format string, args ...any) { rep.errs = append(rep.errs, fmt.Sprintf(format, args...)) }
	byTask := map[string][]*jrun{}
	for _, j := range journals {
		for _, r := range j.runs {
			rep.runs++
			switch {
			case r.Ending == executor.JournalNoProcess:
				rep.noProcess++
			case r.Ending == executor.JournalAbandoned:
				rep.abandoned++
			case r.Open():
				rep.open++
			}
			if r.Process {
				rep.processes++
			}
			if r.Process && r.StartUs == 0 {
				fail("%s: run %d of %s on %s has no start record", j.org, r.Run, r.Task, r.Machine)
			}
			jr := &jrun{JournalRun: r, machine: j.org + "/" + r.Machine, seg: -1}
			byTask[r.Task] = append(byTask[r.Task], jr)
		}
	}
	for _, d := range details {
		runs := byTask[d.ID]
		// Match each machine's segments, in ledger order, to its runs.
		for i, s := range d.Segments {
			var candidates []*jrun
			for _, r := range runs {
				if r.machine == s.Machine && r.seg < 0 {
					candidates = append(candidates, r)
				}
			}
			// Runs before the last matched one on this machine are
			// out of reach: segments match in order.
			last := int64(-1)
			for _, r := range runs {
				if r.machine == s.Machine && r.seg >= 0 {
					last = max(last, r.StartUs)
				}
			}
			var pick *jrun
			okRun := false // pick is a done segment's ok run, found by order
			if skewed && s.Outcome == "done" {
				// A done segment is a run that ended ok. By order alone, a
				// run before it that the ledger never recorded would take
				// its place: a refused start (NotRun), or one whose daemon
				// was killed before the start was committed (abandoned:
				// the dead daemon could not say whether its gate opened;
				// make chaos's clock-restart-3 once did). Such a run stays
				// unrecorded and is still checked for overlaps below.
				for _, r := range candidates {
					if r.StartUs > last && !r.NotRun && r.Reason == executor.ReasonOK {
						pick, okRun = r, true
						break
					}
				}
			}
			for _, r := range candidates {
				if okRun {
					break
				}
				if r.StartUs <= last {
					continue
				}
				if skewed {
					// The earliest after the last matched one, passing over
					// a run whose gate never opened (a start the ledger
					// refused, so no segment) when a run that did open
					// follows: by order alone, the refused run would take
					// the segment of the run after it (make chaos's clock-3
					// once did). A gate closed on a committed start
					// (start_late) still matches when nothing follows.
					if pick == nil || pick.NotRun && !r.NotRun {
						pick = r
					}
					if !r.NotRun {
						break
					}
					continue
				}
				if r.StartUs/1000 <= s.StartMs {
					pick = r // keep the latest that started before the segment
				}
			}
			if pick == nil {
				fail("task %s: segment %d on %s (%s, start %d) matches no journal run of that machine (runs: %s)", d.ID, i, s.Machine, s.Outcome, s.StartMs, describe(runs))
				continue
			}
			pick.seg = i
			rep.matched++
			switch s.Outcome {
			case "done":
				if pick.Reason != executor.ReasonOK {
					fail("task %s: segment %d on %s is done, its journal run %d ended %q (%s)", d.ID, i, s.Machine, pick.Run, pick.Reason, pick.Ending)
				}
			case "failed", "preempted", "cancelled":
				// Closed by the owner's report, sent after the result:
				// the run ended (or, after a restart, was found abandoned).
				if pick.Open() {
					fail("task %s: segment %d on %s is %s, its journal run %d never ended", d.ID, i, s.Machine, s.Outcome, pick.Run)
				}
				if s.Outcome == "failed" && pick.Reason == executor.ReasonOK {
					fail("task %s: segment %d on %s failed, its journal run %d ended ok", d.ID, i, s.Machine, pick.Run)
				}
			}
		}
		// Overlaps, pairwise among the runs that spawned a process.
		var procs []*jrun
		for _, r := range runs {
			if r.Process && !r.NotRun {
				procs = append(procs, r)
			}
		}
		sort.SliceStable(procs, func(i, j int) bool { return procs[i].StartUs < procs[j].StartUs })
		for i, a := range procs {
			for _, b := range procs[i+1:] {
				if a.endUs() <= b.StartUs {
					continue
				}
				why := ""
				if a.seg < 0 {
					why = "unrecorded"
				} else if o := d.Segments[a.seg].Outcome; o == "preempted" || o == "cancelled" {
					why = o
				} else if o == "lost" && !skewed && requeuedBeforeLoss(d.Segments, a.seg) {
					why = "stopping, then lost"
				}
				if why == "" {
					fail("task %s ran twice at once: run %d on %s [%d, %s] (ledger: %s) and run %d on %s from %d",
						d.ID, a.Run, a.machine, a.StartUs, endText(a), d.Segments[a.seg].Outcome, b.Run, b.machine, b.StartUs)
					continue
				}
				rep.overlaps[why]++
				if a.endUs() != math.MaxInt64 {
					rep.longest = max(rep.longest, time.Duration(min(a.endUs(), b.endUs())-b.StartUs)*time.Microsecond)
				}
			}
		}
		for _, r := range runs {
			if r.seg < 0 {
				rep.unrecorded++
			}
		}
		delete(byTask, d.ID)
	}
	for id, runs := range byTask {
		fail("the journals ran task %s, which the ledger does not hold: %s", id, describe(runs))
	}
	return rep
}

func endText(r *jrun) string {
	if r.Open() {
		return "open"
	}
	return fmt.Sprintf("%d %s", r.EndUs, r.Ending)
}

func describe(runs []*jrun) string {
	var b strings.Builder
	for i, r := range runs {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "#%d %s [%d, %s] %s", r.Run, r.machine, r.StartUs, endText(r), r.Reason)
	}
	return b.String()
}

// requeuedBeforeLoss says that segments[i], closed `lost`, was one the
// ledger had already taken the task away from (preempting or cancelling)
// when its machine was declared lost: a later segment of the task started
// before the loss. The ledger closes every open segment of a lost machine
// `lost`, a stopping one included, and a task is placed again only once
// its running segment stopped being the running one (a preemption, a
// cancel, or this very loss). Stamps are compared across peers, so only
// where no clock was stepped (CI's chaos smoke found such a run: the
// owner's own task preempted a guest task on a paused peer, which ran
// elsewhere at once; the loss came three seconds later).
func requeuedBeforeLoss(segments []api.SegmentView, i int) bool {
	for _, s := range segments[i+1:] {
		if s.StartMs < segments[i].EndMs {
			return true
		}
	}
	return false
}
