package ledger

import (
	"testing"
)

func machineLoad(org, machine string, at, permille int64) Command {
	c := act(org, at)
	c.MachineLoad = &MachineLoad{Machine: machine, LoadPermille: permille}
	c.V, _ = RequiredVersion(&c)
	return c
}

// TestMachineLoad: only the machine's organisation records its load, in
// range; the recorded load is what the deadline predictor takes off the
// machine's speed, so admission refuses a deadline a loaded machine can
// no longer meet.
func TestMachineLoad(t *testing.T) {
	f := stableFed(t, 1000) // uni-a: o1 1000 MFLOPS, d1 2000; uni-b: x1 1500
	before := f.l.Hash()
	for _, tc := range []struct {
		name string
		c    Command
		want Code
	}{
		{"another organisation's machine", machineLoad("uni-b", "uni-a/o1", 2000, 500), CodeNotOwner},
		{"an unknown machine", machineLoad("uni-a", "uni-a/zz", 2000, 500), CodeUnknownMachine},
		{"over every CPU", machineLoad("uni-a", "uni-a/o1", 2000, 1001), CodeMalformed},
		{"negative", machineLoad("uni-a", "uni-a/o1", 2000, -1), CodeMalformed},
	} {
		if r := f.apply(tc.c); r.Err == nil || r.Err.Code != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, r.Err, tc.want)
		}
	}
	if tc := machineLoad("uni-a", "uni-a/o1", 2000, 1001); CodeOf(func() error { _, err := EncodeCommand(tc); return err }()) != CodeMalformed {
		t.Error("an out-of-range load encodes")
	}
	if f.l.Hash() != before {
		t.Fatal("a refused load changed the state")
	}

	// A soft task of 1 000 000 MFlop, due 1500 s after 3000 ms: o1 (1100 s
	// with the margin) meets it; d1 and x1 are loaded so that they do not.
	f.must(machineLoad("uni-a", "uni-a/d1", 2000, 750))  // 500 MFLOPS left: 2200 s
	f.must(machineLoad("uni-b", "uni-b/x1", 2000, 1000)) // 1 MFLOPS left
	if m, _ := f.l.Machine("uni-a/d1"); m.OwnerLoadPermille != 750 || m.OwnerLoadAtMs != 2000 {
		t.Fatalf("d1 recorded %d at %d", m.OwnerLoadPermille, m.OwnerLoadAtMs)
	}
	soft := []TaskSpec{{SizeMFlop: 1_000_000, Spec: Spec{Argv: []string{"/bin/sh"}, Class: ClassSoftDeadline, DeadlineMs: 3000 + 1_500_000}}}
	if r := f.l.CheckDeadlines("uni-a", 3000, soft); r != nil {
		t.Fatalf("refused with o1 idle: %v", r)
	}
	f.must(machineLoad("uni-a", "uni-a/o1", 2500, 500)) // 500 MFLOPS left: 2200 s
	r := f.l.CheckDeadlines("uni-a", 3000, soft)
	if r == nil || r.FastestMs != 3000+2_200_000 {
		t.Fatalf("with every machine loaded: %+v, want refused, fastest 2200 s away", r)
	}
	f.must(machineLoad("uni-a", "uni-a/o1", 2600, 0)) // the owner left
	if r := f.l.CheckDeadlines("uni-a", 3000, soft); r != nil {
		t.Fatalf("refused once o1 is idle again: %v", r)
	}
}
