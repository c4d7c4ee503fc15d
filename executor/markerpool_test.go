package executor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
)

// TestMachineMarkerReused: the runs of a machine reuse its end marker
// (issue 22: no inode per run), the journal names it in each start, and
// after each run it holds that run's end, not an earlier one's.
func TestMachineMarkerReused(t *testing.T) {
	e, path := newJournaled(t, allowShell(), JournalOptions{})
	var ends []int64
	for _, id := range []string{"a", "b"} {
		r := run(t, e, sh(id, "true"))
		if r.Reason != ReasonOK {
			t.Fatalf("%s: %s %s", id, r.Reason, r.Detail)
		}
		if _, err := os.Stat(supervise.EndMarkerFile(e.cfg.TasksDir, id, r.Attempt)); !os.IsNotExist(err) {
			t.Errorf("%s: a marker of its own in its attempt directory (%v)", id, err)
		}
		at, ok := supervise.ReadEndMarker(filepath.Join(e.cfg.TasksDir, supervise.SlotMarker(0)))
		rs := runsOf(t, path, id)
		if !ok || len(rs) != 1 || at < rs[0].StartUs {
			t.Fatalf("%s: marker %d (%v), runs %+v: want a time at or after the run's start", id, at, ok, rs)
		}
		ends = append(ends, at)
	}
	if ends[1] <= ends[0] {
		t.Errorf("the second run's marker %d is not after the first's %d", ends[1], ends[0])
	}
	markers := map[string]bool{}
	for _, rec := range readJournal(t, path) {
		if rec.Event == JournalStart {
			markers[rec.Marker] = true
		}
	}
	if want := supervise.SlotMarker(0); len(markers) != 1 || !markers[want] {
		t.Errorf("start records name markers %v, want only %s (m1's)", markers, want)
	}
}

// TestBootReadsOnlyTheRunsOwnMarkerTime: a boot takes an open run's end
// from the marker its start names, but never a time from before the run
// started (a reused marker still holding its previous run's time, if a
// power loss cut the emptying), never a marker outside the tasks
// directory, and reads the attempt's own marker for a start written
// before markers were per machine.
func TestBootReadsOnlyTheRunsOwnMarkerTime(t *testing.T) {
	const start = int64(1_700_000_000_000_000)
	for _, c := range []struct {
		name     string
		marker   string // the start record's Marker
		file     string // where the test writes the time, relative to the tasks directory
		at       int64
		wantTime bool // the boot journals at; otherwise its own time
	}{
		{"the run's own end", supervise.SlotMarker(0), supervise.SlotMarker(0), start + 5, true},
		{"the previous run's end", supervise.SlotMarker(0), supervise.SlotMarker(0), start - 5, false},
		{"outside the tasks directory", "../outside.end", "../outside.end", start + 5, false},
		{"absolute", "/tmp/x.end", supervise.SlotMarker(0), start + 5, false},
		{"before issue 22: the attempt's own", "", "a/attempt-1/supervisor.end", start + 5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			tasks := filepath.Join(dir, "tasks")
			p := filepath.Join(tasks, c.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(strconv.FormatInt(c.at, 10)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, RunJournalFile)
			rec := `{"v":1,"ev":"start","run":1,"task":"a","machine":"m1","attempt":1,"pid":999999999,"at_us":` + strconv.FormatInt(start, 10)
			if c.marker != "" {
				rec += `,"marker":"` + c.marker + `"`
			}
			if err := os.WriteFile(path, []byte(rec+"}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			before := time.Now().UnixMicro()
			j, err := openRunJournal(path, JournalOptions{}, tasks)
			if err != nil {
				t.Fatal(err)
			}
			j.close()
			rs := runsOf(t, path, "a")
			if len(rs) != 1 || rs[0].Ending != JournalAbandoned {
				t.Fatalf("runs %+v, want one abandoned", rs)
			}
			switch {
			case c.wantTime && rs[0].EndUs != c.at:
				t.Errorf("abandoned at %d, want the marker's %d", rs[0].EndUs, c.at)
			case !c.wantTime && rs[0].EndUs < before:
				t.Errorf("abandoned at %d, want the boot's time (≥ %d), not the marker's %d", rs[0].EndUs, before, c.at)
			}
		})
	}
}

// TestConcurrentRunsOfAMachineHoldTheirOwnMarkers: a machine with several
// CPUs runs several tasks at once; each run in progress gets a marker no
// other run holds (a marker found locked left a run without one), each
// marker holds its own run's end, and a marker is handed out again once
// its run is over.
func TestConcurrentRunsOfAMachineHoldTheirOwnMarkers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, RunJournalFile)
	e := newProcCfg(t, ProcessConfig{TasksDir: filepath.Join(dir, "tasks"), Policy: allowShell(), DisableRAPL: true, JournalPath: path,
		Machines: []MachineConfig{{Name: "m1", GFLOPS: 2, BusyWatts: 50, CPUs: 2}}})
	gate := filepath.Join(dir, "go")
	for _, id := range []string{"a", "b"} {
		if err := e.Start(context.Background(), "m1", sh(id, "while [ ! -e "+gate+" ]; do sleep 0.02; done")); err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := next(t, e); r.Reason != ReasonOK {
			t.Fatalf("%s: %s %s", r.ID, r.Reason, r.Detail)
		}
	}
	r := run(t, e, sh("c", "true"))
	if r.Reason != ReasonOK {
		t.Fatalf("c: %s %s", r.Reason, r.Detail)
	}
	byTask := map[string]string{}
	for _, rec := range readJournal(t, path) {
		if rec.Event == JournalStart {
			byTask[rec.Task] = rec.Marker
		}
	}
	if byTask["a"] == byTask["b"] || byTask["a"] == "" || byTask["b"] == "" {
		t.Fatalf("two runs at once on m1 hold markers %q and %q: want two different ones", byTask["a"], byTask["b"])
	}
	if want := supervise.SlotMarker(0); byTask["c"] != want {
		t.Errorf("the run after them holds %q, want the machine's first marker %s again", byTask["c"], want)
	}
	for _, id := range []string{"a", "b"} {
		at, ok := supervise.ReadEndMarker(filepath.Join(e.cfg.TasksDir, byTask[id]))
		rs := runsOf(t, path, id)
		if id == "a" && byTask[id] == supervise.SlotMarker(0) || id == "b" && byTask[id] == supervise.SlotMarker(0) {
			continue // overwritten by c's run since
		}
		if !ok || len(rs) != 1 || at < rs[0].StartUs {
			t.Errorf("%s: marker %s holds %d (%v), runs %+v: want its own end", id, byTask[id], at, ok, rs)
		}
	}
}
