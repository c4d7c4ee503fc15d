package audit

import (
	"context"
	"fmt"
	"testing"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
)

// BenchmarkVerify replays logs of growing length: each round submits 4
// tasks, allocates them to 4 machines, starts and ends them (10 commands),
// so the state grows by 4 finished tasks a round and the check after each
// entry costs more as the history grows (terminal tasks stay in the
// state). Reported: entries per second of replay with the check after
// every entry.
func BenchmarkVerify(b *testing.B) {
	for _, tc := range []struct {
		rounds int
		paced  bool
	}{{100, false}, {500, false}, {100, true}, {500, true}, {2500, true}} {
		mode := "every-entry"
		if tc.paced {
			mode = "paced"
		}
		b.Run(fmt.Sprintf("%s/rounds=%d", mode, tc.rounds), func(b *testing.B) {
			es := roundsHistory(b, tc.rounds)
			dir := raftDir(b, es)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, err := Verify(context.Background(), dir, Options{Paced: tc.paced})
				if err != nil || !r.OK() || r.Rejected != 0 {
					b.Fatalf("%v %+v", err, r)
				}
			}
			b.ReportMetric(float64(len(es)*b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

func roundsHistory(b *testing.B, rounds int) []entry {
	b.Helper()
	var cmds []ledger.Command
	c := env("a", 1000)
	var ms []ledger.MachineSpec
	for i := 1; i <= 4; i++ {
		ms = append(ms, ledger.MachineSpec{Name: fmt.Sprintf("m%d", i), MFLOPS: 1000, BusyMilliW: 100_000})
	}
	c.RegisterOrg = &ledger.RegisterOrg{LimitMilliW: 1_000_000, Machines: ms}
	cmds = append(cmds, c)
	n := 0
	for r := 0; r < rounds; r++ {
		s := env("a", int64(2000+r))
		s.SubmitTasks = &ledger.SubmitTasks{}
		for i := 0; i < 4; i++ {
			s.SubmitTasks.Tasks = append(s.SubmitTasks.Tasks, ledger.TaskSpec{SizeMFlop: 1000, Spec: ledger.Spec{Argv: []string{"/bin/true"}}})
		}
		cmds = append(cmds, s)
		d := env("a", int64(2000+r))
		d.Decisions = &ledger.Decisions{}
		for i := 1; i <= 4; i++ {
			d.Decisions.Decisions = append(d.Decisions.Decisions, ledger.Decision{Kind: ledger.DecideAllocate, Task: fmt.Sprintf("a-%d", n+i), Machine: fmt.Sprintf("a/m%d", i)})
		}
		cmds = append(cmds, d)
		for i := 1; i <= 4; i++ {
			st := env("a", int64(2000+r))
			st.TaskStarted = &ledger.TaskStarted{Task: fmt.Sprintf("a-%d", n+i), Machine: fmt.Sprintf("a/m%d", i)}
			cmds = append(cmds, st)
		}
		for i := 1; i <= 4; i++ {
			en := env("a", int64(2001+r))
			en.TaskEnded = &ledger.TaskEnded{Task: fmt.Sprintf("a-%d", n+i), Machine: fmt.Sprintf("a/m%d", i), EnergyMilliJ: 100, Source: ledger.EnergyDeclared}
			cmds = append(cmds, en)
		}
		n += 4
	}
	es := []entry{{1, 1, raft.LogConfiguration, nil}}
	for i, c := range cmds {
		data, err := ledger.EncodeCommand(c)
		if err != nil {
			b.Fatal(err)
		}
		es = append(es, entry{uint64(i + 2), 1, raft.LogCommand, data})
	}
	return es
}
