package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/internal/audit"
)

// checkStopped runs the checks that need the peers stopped, after the
// live checks of a scenario: it records the federation's agreed applied
// index and state hash and every task's segments, stops every peer
// cleanly (SIGTERM, all at once), then
//
//   - compares every peer's run journal with the ledger (checkRuns: no
//     task ran twice at once except after a preemption, a cancel or a
//     machine loss; every segment has the executor's record);
//   - replays every peer's Raft log with `peer verify`: to the agreed
//     index, which must give the agreed hash on every peer, and over the
//     whole log (whose tail the shutdown may have extended), with the
//     ledger's invariants — PI_i ≤ Lim_i for every organisation, energy
//     balance — checked after every entry.
func (c *cluster) checkStopped(sc scenario) {
	t := c.t
	t.Helper()
	var agreed api.LedgerView
	c.eventually(2*time.Minute, "one ledger on every peer before the stop", func(ctx context.Context) (bool, string) {
		var seen []string
		same := true
		for i, p := range c.peers {
			l, err := p.client.Ledger(ctx)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", p.name, err)
			}
			if i == 0 {
				agreed = l
			}
			same = same && l.AppliedIndex == agreed.AppliedIndex && l.StateHash == agreed.StateHash
			seen = append(seen, fmt.Sprintf("%s@%d %.12s", p.name, l.AppliedIndex, l.StateHash))
		}
		return same, strings.Join(seen, ", ")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tasks, err := c.peers[0].client.Tasks(ctx, api.TaskQuery{})
	if err != nil {
		t.Fatalf("tasks: %v", err)
	}
	details := make([]api.TaskDetail, 0, len(tasks))
	for _, tk := range tasks {
		d, err := c.peers[0].client.Task(ctx, tk.ID)
		if err != nil {
			t.Fatalf("task %s: %v", tk.ID, err)
		}
		details = append(details, d)
	}

	var wg sync.WaitGroup
	for _, p := range c.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.proc.Stop(30 * time.Second); err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) || !strings.Contains(err.Error(), "signal: killed") {
					t.Logf("%s: stopped with %v", p.name, err)
				} else {
					t.Errorf("%s did not stop within 30 s of SIGTERM and was killed", p.name)
				}
			}
		}()
	}
	wg.Wait()

	// The executors' own records.
	var journals []peerJournal
	for _, p := range c.peers {
		recs, err := executor.ReadRunJournal(filepath.Join(p.data, executor.RunJournalFile))
		if err != nil {
			t.Errorf("%s's run journal: %v", p.name, err)
			continue
		}
		journals = append(journals, peerJournal{org: p.name, runs: executor.JournalRuns(recs)})
	}
	skewed := false
	for _, k := range sc.kinds {
		skewed = skewed || strings.HasPrefix(k, "clock")
	}
	rep := checkRuns(details, journals, skewed)
	how := "by time and order"
	if skewed {
		how = "by order (stepped clocks)"
	}
	t.Logf("run journals (segments matched %s): %v", how, rep)
	for _, e := range rep.errs {
		t.Errorf("run journals: %s", e)
	}

	// Every committed state, replayed.
	upto := strconv.FormatUint(agreed.AppliedIndex, 10)
	for _, p := range c.peers {
		r, err := verify(ctx, p.data, "--upto", upto, "--expect-hash", agreed.StateHash)
		if err != nil {
			t.Errorf("%s: peer verify --upto %s: %v", p.name, upto, err)
			continue
		}
		whole, err := verify(ctx, p.data)
		if err != nil {
			t.Errorf("%s: peer verify (whole log): %v", p.name, err)
			continue
		}
		t.Logf("peer verify %s: %d entries (%d commands, %d rejected %v, %d decisions refused) from index %d, invariants after every one; index %d hash %.16s as agreed; whole log to %d: all hold, hash %.16s",
			p.name, r.Entries, r.Commands, r.Rejected, r.RejectedByKind, r.RefusedDecisions, r.BaseIndex, r.Index, r.Hash, whole.Index, whole.Hash)
	}
}

// verify runs `peer verify --json` on a data directory and returns its
// report; a violation or a failure to verify is an error.
func verify(ctx context.Context, data string, args ...string) (*audit.Report, error) {
	cmd := exec.CommandContext(ctx, peerBin, append([]string{"verify", "--data", data, "--json"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	var r audit.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("%v: %s (report: %v)", runErr, strings.TrimSpace(errb.String()), err)
	}
	if runErr != nil {
		return &r, fmt.Errorf("%v: %s", runErr, strings.TrimSpace(errb.String()))
	}
	return &r, nil
}
