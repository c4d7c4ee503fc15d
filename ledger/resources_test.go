package ledger

import (
	"bytes"
	"strings"
	"testing"
)

// bigMachine is an 8-CPU, 16 GiB machine that allows /bin/sh to everyone.
func bigMachine(name string) MachineSpec {
	m := mspec(name, 8000, 80_000)
	m.MachineResources = MachineResources{CPUs: 8, MemoryBytes: 16 << 30, OS: "linux", Arch: "amd64",
		Labels: []string{"infiniband", "matlab=R2024a"}, Owner: &OwnerPolicy{Allow: []string{"/bin/sh"}}}
	return m
}

func submitReq(org string, at int64, argv0 string, req TaskRequest, n int) Command {
	c := act(org, at)
	c.SubmitTasks = &SubmitTasks{}
	for range n {
		c.SubmitTasks.Tasks = append(c.SubmitTasks.Tasks, TaskSpec{SizeMFlop: 1000, Spec: Spec{Argv: []string{argv0}, TaskRequest: req}})
	}
	return c
}

// TestSharedMachineInTheLedger: two 4-CPU tasks share an 8-CPU machine,
// each counting half its power and draw; a third is refused for want of
// room; the owner's policy and the attributes are enforced on decisions;
// a lost machine gives back every task it held.
func TestSharedMachineInTheLedger(t *testing.T) {
	f := newFed(t)
	f.must(register("u1", 1_000_000, bigMachine("big")))
	f.must(submitReq("u1", 2000, "/bin/sh", TaskRequest{CPUs: 4}, 3))
	f.must(decide("u1", 3000, alloc("u1-1", "u1/big"), alloc("u1-2", "u1/big")))
	m, _ := f.l.Machine("u1/big")
	if got := m.Tasks(); len(got) != 2 {
		t.Fatalf("machine holds %v, want two tasks", got)
	}
	if pi := f.l.pi["u1"]; pi != 80_000 {
		t.Fatalf("PI = %d mW, want the whole machine's 80000 (two halves)", pi)
	}
	// A snapshot of the shared machine restores to the same state, with
	// the same accounting, and replaying the log gives the same hash.
	restored := New()
	if err := restored.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil {
		t.Fatal(err)
	}
	if restored.Hash() != f.l.Hash() || restored.pi["u1"] != 80_000 || restored.CheckInvariants() != nil {
		t.Fatalf("restored: hash %s (want %s), PI %d, %v", restored.Hash(), f.l.Hash(), restored.pi["u1"], restored.CheckInvariants())
	}
	replayed := New()
	for i, e := range f.log {
		replayed.Apply(uint64(i+1), e)
	}
	if replayed.Hash() != f.l.Hash() {
		t.Fatal("replaying the log gives another state")
	}
	r := f.must(decide("u1", 3100, alloc("u1-3", "u1/big")))
	if e := r.Decisions[0].Err; e == nil || e.Code != CodeMachineBusy || !strings.Contains(e.Msg, "no room") {
		t.Fatalf("third 4-CPU task on a full 8-CPU machine: %v, want machine_busy (no room)", e)
	}

	f.must(submitReq("u1", 4000, "/usr/bin/python3", TaskRequest{}, 1))
	r = f.must(decide("u1", 4100, preempt("u1-4", "u1/big", "u1-1")))
	if e := r.Decisions[0].Err; e == nil || e.Code != CodeNoMatch || !strings.Contains(e.Msg, "refuses executable") {
		t.Fatalf("python3 on a /bin/sh-only machine: %v, want no_match", e)
	}
	f.must(submitReq("u1", 4200, "sh", TaskRequest{Requirements: []Requirement{{"label.cuda", "is_set", ""}}}, 1))
	r = f.must(decide("u1", 4300, preempt("u1-5", "u1/big", "u1-1")))
	if e := r.Decisions[0].Err; e == nil || e.Code != CodeNoMatch || !strings.Contains(e.Msg, "label.cuda") {
		t.Fatalf("a label the machine lacks: %v, want no_match naming it", e)
	}
	f.must(submitReq("u1", 4400, "sh", TaskRequest{CPUs: 2, Requirements: []Requirement{{"label.matlab", "version", ">= 2024"}}}, 1))
	r = f.must(decide("u1", 4500, alloc("u1-6", "u1/big")))
	if e := r.Decisions[0].Err; e == nil {
		t.Fatal("a 2-CPU task on a full machine was placed")
	}

	f.must(lost("u1", "u1/big", 5000))
	for _, id := range []string{"u1-1", "u1-2"} {
		if tk, _ := f.l.Task(id); tk.State != TaskQueued || tk.Machine != "" {
			t.Fatalf("after the loss %s is %s on %q, want queued", id, tk.State, tk.Machine)
		}
	}
	if f.l.pi["u1"] != 0 || f.l.alloc["u1"] != 0 {
		t.Fatalf("after the loss PI %d allocated %d, want 0", f.l.pi["u1"], f.l.alloc["u1"])
	}
}

// TestSubmitRefusesTooLarge: a memory request larger than every machine is
// refused at submit with CodeNoMachineFits and changes nothing; a federation
// with a machine of undeclared memory takes any request.
func TestSubmitRefusesTooLarge(t *testing.T) {
	f := newFed(t)
	f.must(register("u1", 1_000_000, bigMachine("big")))
	before := f.l.Hash()
	r := f.apply(submitReq("u1", 2000, "sh", TaskRequest{MemoryBytes: 64 << 30}, 1))
	if r.Err == nil || r.Err.Code != CodeNoMachineFits || !strings.Contains(r.Err.Msg, "memory") {
		t.Fatalf("64 GiB on a 16 GiB federation: %v, want no_machine_fits", r.Err)
	}
	if f.l.Hash() != before {
		t.Fatal("a refused submit changed the state")
	}
	if r := f.apply(submitReq("u1", 2000, "sh", TaskRequest{CPUs: 9}, 1)); r.Err == nil || r.Err.Code != CodeNoMachineFits {
		t.Fatalf("9 CPUs on an 8-CPU federation: %v, want no_machine_fits", r.Err)
	}
	add := act("u1", 2500)
	add.AddMachine = &AddMachine{Machine: mspec("plain", 1000, 10_000)}
	f.must(add)
	f.must(submitReq("u1", 3000, "sh", TaskRequest{MemoryBytes: 64 << 30}, 1))
}

// TestMachineResourcesValidation: bad declarations and requests are
// refused as malformed.
func TestMachineResourcesValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  MachineResources
		want string
	}{
		{"negative cpus", MachineResources{CPUs: -1}, "cpus"},
		{"unsorted labels", MachineResources{Labels: []string{"b", "a"}}, "sorted"},
		{"bad label", MachineResources{Labels: []string{"a b"}}, "label"},
		{"bad os", MachineResources{OS: "li nux"}, "os"},
		{"bad policy org", MachineResources{Owner: &OwnerPolicy{Orgs: []string{"a/b"}}}, "organisation"},
	} {
		m := mspec("m", 1000, 1000)
		m.MachineResources = tc.res
		if err := m.validate(); err == nil || !strings.Contains(err.Msg, tc.want) {
			t.Errorf("%s: %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
	for _, req := range []TaskRequest{
		{CPUs: -2},
		{Requirements: []Requirement{{"colour", "=", "red"}}},
		{Requirements: []Requirement{{"os", "~", "linux"}}},
		{Requirements: []Requirement{{"label.cuda", "version", "not a version"}}},
	} {
		s := Spec{TaskRequest: req}
		if err := s.validate(); err == nil {
			t.Errorf("request %+v accepted", req)
		}
	}
}

// TestInvariantsCatchOverCommit: a state whose machine holds more than its
// capacity (never produced by Apply) fails CheckInvariants, which peer
// verify runs after every entry.
func TestInvariantsCatchOverCommit(t *testing.T) {
	f := newFed(t)
	f.must(register("u1", 1_000_000, bigMachine("big")))
	f.must(submitReq("u1", 2000, "/bin/sh", TaskRequest{CPUs: 4}, 2))
	f.must(decide("u1", 3000, alloc("u1-1", "u1/big"), alloc("u1-2", "u1/big")))
	if err := f.l.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	f.l.machines["u1/big"].CPUs = 6 // as if the log had been tampered with
	err := f.l.CheckInvariants()
	if err == nil || !strings.Contains(err.Error(), "over-committed") {
		t.Fatalf("an 8-CPU load on a 6-CPU machine: %v, want over-committed", err)
	}
}
