package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// The peers' info logs say when a report was committed and applied on the
// proposing peer: the bridge logs "task started" once its TaskStarted is
// applied locally, "task run ended" once its TaskEnded is. With the
// commands' own times they split the path between start and end.
var logLine = regexp.MustCompile(`^time=(\S+) level=INFO msg="(task started|task run ended)" .*?\btask=(\S+)`)

// readPeerLogs reads every *.stderr file of dir into tl.
func readPeerLogs(dir string, tl *timeline) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.stderr"))
	if err != nil {
		return err
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = scanLog(f, tl)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func scanLog(r io.Reader, tl *timeline) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := logLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		t := tl.Tasks[m[3]]
		if t == nil {
			continue
		}
		if m[2] == "task started" {
			t.StartLogged = at.UnixMilli()
		} else {
			t.EndLogged = at.UnixMilli()
		}
	}
	return sc.Err()
}

// journalRecord is the part of a process executor's run journal
// (DATA/runs.jsonl, docs/EXECUTOR.md) the timeline uses: when the process
// was spawned (start), reaped and found gone with its group (end).
type journalRecord struct {
	Event  string `json:"ev"`
	Task   string `json:"task"`
	AtUs   int64  `json:"at_us"`
	ExitUs int64  `json:"exit_us"`
}

// readJournals reads the run journal of every data directory under root
// into tl; a peer without one (an executor without the journal) adds
// nothing.
func readJournals(root string, tl *timeline) error {
	files, err := filepath.Glob(filepath.Join(root, "*", "runs.jsonl"))
	if err != nil {
		return err
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			var r journalRecord
			if len(line) == 0 || json.Unmarshal(line, &r) != nil {
				continue
			}
			t := tl.Tasks[r.Task]
			if t == nil {
				continue
			}
			switch r.Event {
			case "start":
				t.SpawnUs = r.AtUs
			case "end":
				t.ReapUs, t.GoneUs = r.ExitUs, r.AtUs
			}
		}
	}
	return nil
}

// reportJournal splits the executor's part of the path with the journal's
// times (µs).
func (tl *timeline) reportJournal(w io.Writer) {
	var toSpawn, spawnToStart, spawnToReap, reapToGone, goneToEnd []int64
	for _, t := range tl.Tasks {
		if !t.complete() || t.SpawnUs == 0 || t.GoneUs == 0 {
			continue
		}
		toSpawn = append(toSpawn, t.SpawnUs-t.DecideApp*1000)
		spawnToStart = append(spawnToStart, t.StartAt*1000-t.SpawnUs)
		spawnToReap = append(spawnToReap, t.ReapUs-t.SpawnUs)
		reapToGone = append(reapToGone, t.GoneUs-t.ReapUs)
		goneToEnd = append(goneToEnd, t.EndAt*1000-t.GoneUs)
	}
	if len(toSpawn) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFrom the executors' run journals (runs.jsonl; µs, against the commands' ms):\n\n| step (ms) | n | mean | p50 | p90 | max |\n|---|---|---|---|---|---|\n")
	for _, r := range []struct {
		name string
		xs   []int64
	}{
		{"decisions appended → process spawned (decision commit and apply, bridge, directories)", toSpawn},
		{"process spawned → TaskStarted proposed (journal fsync, gate)", spawnToStart},
		{"process spawned → reaped (the task: gate shell, exec `true`)", spawnToReap},
		{"reaped → group found gone", reapToGone},
		{"group gone → TaskEnded proposed (journal, logs, result, wait for the start's commit, outputs)", goneToEnd},
	} {
		s := summarize(r.xs)
		fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.1f | %.1f |\n", r.name, s.N, s.Mean/1000, s.P50/1000, s.P90/1000, s.Max/1000)
	}
}

// reportLogged splits the reports' commits using the logged times.
func (tl *timeline) reportLogged(w io.Writer) {
	var startCommit, startToEnd, endCommit []int64
	for _, t := range tl.Tasks {
		if !t.complete() || t.StartLogged == 0 || t.EndLogged == 0 {
			continue
		}
		startCommit = append(startCommit, t.StartLogged-t.StartAt)
		startToEnd = append(startToEnd, t.EndAt-t.StartLogged)
		endCommit = append(endCommit, t.EndLogged-t.EndAt)
	}
	if len(startCommit) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFrom the peers' info logs (the proposing peer's view of its own reports):\n\n| step (ms) | n | mean | p50 | p90 | max |\n|---|---|---|---|---|---|\n")
	for _, r := range []struct {
		name string
		xs   []int64
	}{
		{"TaskStarted proposed → committed and applied on the proposer", startCommit},
		{"TaskStarted applied → TaskEnded proposed (process ended meanwhile; outputs shipped)", startToEnd},
		{"TaskEnded proposed → committed and applied on the proposer", endCommit},
	} {
		s := summarize(r.xs)
		fmt.Fprintf(w, "| %s | %d | %.1f | %.0f | %.0f | %.0f |\n", r.name, s.N, s.Mean, s.P50, s.P90, s.Max)
	}
}
