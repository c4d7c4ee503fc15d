package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
)

// bigHistory is a log whose state grows to about 2,000 tasks (20 submits
// of 100) and then sees 600 heartbeats.
func bigHistory(t *testing.T) []entry {
	t.Helper()
	es := []entry{{1, 1, raft.LogConfiguration, nil}}
	idx := uint64(2)
	add := func(c ledger.Command) {
		es = append(es, entry{idx, 1, raft.LogCommand, enc(t, c)})
		idx++
	}
	reg := env("a", 1000)
	reg.RegisterOrg = &ledger.RegisterOrg{LimitMilliW: 300_000, Machines: []ledger.MachineSpec{{Name: "m1", MFLOPS: 1000, BusyMilliW: 100_000}}}
	add(reg)
	for range 20 {
		c := env("a", 2000)
		c.SubmitTasks = &ledger.SubmitTasks{}
		for range 100 {
			c.SubmitTasks.Tasks = append(c.SubmitTasks.Tasks, ledger.TaskSpec{SizeMFlop: 1000, Spec: ledger.Spec{Argv: []string{"/bin/true"}}})
		}
		add(c)
	}
	for i := range 600 {
		c := env("a", 3000+int64(i))
		c.Heartbeat = &ledger.Heartbeat{Machine: "a/m1"}
		add(c)
	}
	return es
}

// TestPacedChecksAreLinear: paced, the checks together visit at most
// PaceRatio records per command (plus one last full check), where
// checking after every command visits the whole state each time; both
// replays end at the same state.
func TestPacedChecksAreLinear(t *testing.T) {
	dir := raftDir(t, bigHistory(t))
	run := func(opt Options) (*Report, int) {
		visits := 0
		opt.Check = func(l *ledger.Ledger) error {
			visits += l.Size()
			return Invariants(l)
		}
		r, err := Verify(context.Background(), dir, opt)
		if err != nil || !r.OK() {
			t.Fatalf("%+v: %v %+v", opt, err, r.Violation)
		}
		return r, visits
	}
	every, everyVisits := run(Options{CheckEvery: 1})
	paced, pacedVisits := run(Options{Paced: true})
	if every.Hash != paced.Hash || every.Commands != paced.Commands || every.Checked != every.Commands {
		t.Fatalf("every command: %d checks of %d, hash %s; paced hash %s", every.Checked, every.Commands, every.Hash, paced.Hash)
	}
	final := 1 + 2000 + 1 // organisation, tasks, machine
	if bound := PaceRatio*paced.Commands + final; pacedVisits > bound {
		t.Fatalf("paced: %d record visits for %d commands, more than %d", pacedVisits, paced.Commands, bound)
	}
	if pacedVisits*10 > everyVisits {
		t.Fatalf("paced: %d record visits, every command: %d: not a tenth", pacedVisits, everyVisits)
	}
	t.Logf("%d commands: %d checks, %d record visits paced; %d checks, %d visits every command", paced.Commands, paced.Checked, pacedVisits, every.Checked, everyVisits)
}

// TestPacedViolationNamesItsRange: a violation between two paced checks is
// reported at the next check with the range of entries that may have
// caused it, which holds the entry at fault.
func TestPacedViolationNamesItsRange(t *testing.T) {
	dir := raftDir(t, bigHistory(t))
	const bad = 300
	r, err := Verify(context.Background(), dir, Options{Paced: true, Check: func(l *ledger.Ledger) error {
		if l.AppliedIndex() >= bad {
			return errors.New("broken on purpose")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	v := r.Violation
	if v == nil || v.Kind != KindInvariant || v.Index < bad || !strings.Contains(v.Message, "broken by one of the entries") {
		t.Fatalf("violation %+v", v)
	}
	var from, to uint64
	if _, err := fmtSscan(v.Message, &from, &to); err != nil || from > bad || to != v.Index {
		t.Fatalf("range %d-%d (%v) in %q does not hold index %d", from, to, err, v.Message, bad)
	}
}

// fmtSscan reads the "entries A-B" range of a violation's message.
func fmtSscan(msg string, from, to *uint64) (int, error) {
	_, rest, ok := strings.Cut(msg, "entries ")
	if !ok {
		return 0, errors.New("no range")
	}
	rest = strings.TrimSuffix(rest, ")")
	return fmt.Sscanf(rest, "%d-%d", from, to)
}
