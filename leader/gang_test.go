package leader

import (
	"crypto/rand"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/coopgrid/coopgrid/ledger"
)

// ledgerView is a StateViewer over a ledger the test drives.
type ledgerView struct{ l *ledger.Ledger }

func (v ledgerView) View(fn func(*ledger.Ledger)) { fn(v.l) }

// TestPlanPlacesGangWhole: on a federation whose leader decides, the
// leader's pass proposes a waiting gang's parts together (ledger's gang
// step) even when the policy has nothing else to place, and proposes
// nothing while one organisation lacks a free machine per part.
func TestPlanPlacesGangWhole(t *testing.T) {
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	self, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	lg := ledger.New()
	idx := uint64(0)
	apply := func(c ledger.Command) ledger.Result {
		t.Helper()
		c.Org, c.Peer, c.AtMs = "uni-a", self.String(), 1000+int64(idx)
		data, err := ledger.EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		idx++
		res := lg.Apply(idx, data)
		if res.Err != nil {
			t.Fatalf("%s refused: %v", res.Kind, res.Err)
		}
		if err := lg.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	machine := func(name string) ledger.MachineSpec {
		return ledger.MachineSpec{Name: name, MFLOPS: 1000, BusyMilliW: 100_000, MachineResources: ledger.MachineResources{CPUs: 4}}
	}
	apply(ledger.Command{RegisterOrg: &ledger.RegisterOrg{LimitMilliW: 1_000_000, Machines: []ledger.MachineSpec{machine("m1"), machine("m2")}}})
	part := func(rank int) ledger.TaskSpec {
		return ledger.TaskSpec{SizeMFlop: 1000, Spec: ledger.Spec{Argv: []string{"/bin/true"}, TaskRequest: ledger.TaskRequest{CPUs: 4}, Gang: &ledger.Gang{Size: 2, Rank: rank}}}
	}
	plain := part(0)
	plain.Spec.Gang = nil
	apply(ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{plain}}})
	apply(ledger.Command{Decisions: &ledger.Decisions{Decisions: []ledger.Decision{{Kind: ledger.DecideAllocate, Task: "uni-a-1", Machine: "uni-a/m1"}}}})
	apply(ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{part(0), part(1)}}})

	l, err := New(Config{Self: self, Org: "uni-a", Policy: "ehosep"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := l.plan(ledgerView{lg}); ok && p.count > 0 {
		t.Fatalf("a pass with one free machine for a gang of two proposed %d decisions", p.count)
	}
	apply(ledger.Command{TaskStarted: &ledger.TaskStarted{Task: "uni-a-1", Machine: "uni-a/m1"}})
	apply(ledger.Command{TaskEnded: &ledger.TaskEnded{Task: "uni-a-1", Machine: "uni-a/m1", Source: ledger.EnergyDeclared}})
	p, ok := l.plan(ledgerView{lg})
	if !ok || p.kind != ledger.KindDecisions || p.count != 2 {
		t.Fatalf("pass: ok %v, %s of %d decisions; want the gang's 2", ok, p.kind, p.count)
	}
	idx++
	res := lg.Apply(idx, p.data)
	if res.Err != nil || res.AcceptedDecisions() != 2 {
		t.Fatalf("the pass's decisions: %v %+v", res.Err, res.Decisions)
	}
	for _, id := range []string{"uni-a-2", "uni-a-3"} {
		if tk, _ := lg.Task(id); tk.State != ledger.TaskAssigned {
			t.Fatalf("%s is %s", id, tk.State)
		}
	}
}
