package leader

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
)

// Signed commands against a member that misbehaves (issue 15): the
// leader, which appends without admission, and a forwarder running
// modified code. The misbehaving peer is driven by the test itself through
// the consensus node's own calls (AppendAsLeader, a raw ProtoPropose
// request): that is all a modified binary needs, so no hook in the
// production code is involved. On today's main without signatures, every
// unsigned forgery below is applied on every peer.

// forgeryFixture is a three-peer federation with the scheduler off (the
// test places tasks itself): the victim's task <victim>-1 runs on
// <victim>/m0 and <victim>-2 waits in the queue.
type forgeryFixture struct {
	c              *cluster
	leader, victim *tpeer
	running        string
}

func newForgeryFixture(t *testing.T) *forgeryFixture {
	c := newCluster(t, 3, 2, func(_ *consensus.Config, l *Config) { l.DisableScheduler = true })
	f := &forgeryFixture{c: c, leader: c.waitLeader()}
	f.victim = c.other(f.leader)
	ids := submit(t, f.victim, 2)
	f.running = ids[0]
	place := command(f.leader, ledger.Command{Decisions: &ledger.Decisions{Decisions: []ledger.Decision{
		{Kind: ledger.DecideAllocate, Task: ids[0], Machine: f.victim.org + "/m0"}}}})
	if res := appendAsLeader(t, f.leader, place); !res.Applied() || res.AcceptedDecisions() != 1 {
		t.Fatalf("place %s: %v %+v", ids[0], res.Err, res.Decisions)
	}
	if res := mustPropose(t, f.victim, ledger.Command{TaskStarted: &ledger.TaskStarted{Task: ids[0], Machine: f.victim.org + "/m0"}}); !res.Applied() {
		t.Fatalf("start %s: %v", ids[0], res.Err)
	}
	c.converge()
	return f
}

func appendAsLeader(tb testing.TB, p *tpeer, data []byte) ledger.Result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.node.AppendAsLeader(ctx, data)
	if err != nil {
		tb.Fatalf("%s append: %v", p.name, err)
	}
	return res
}

// encodeAs encodes c with the given envelope, signed by key (nil: unsigned).
func encodeAs(tb testing.TB, c ledger.Command, key crypto.PrivKey) []byte {
	tb.Helper()
	c.V = ledger.CommandVersion
	c.AtMs = time.Now().UnixMilli()
	var (
		b   []byte
		err error
	)
	if key == nil {
		b, err = ledger.EncodeCommand(c)
	} else {
		b, err = ledger.EncodeSigned(c, key)
	}
	if err != nil {
		tb.Fatalf("encode: %v", err)
	}
	return b
}

// refusedEverywhere checks that every running peer applied index with
// the verdict want and that the state hash is still before.
func (f *forgeryFixture) refusedEverywhere(t *testing.T, index uint64, want ledger.Code, before string) {
	t.Helper()
	if after := f.c.converge(); after != before {
		t.Fatalf("state hash changed: %.12s → %.12s", before, after)
	}
	for _, p := range f.c.running() {
		got, ok := p.verdict(index)
		if !ok || got != want {
			t.Errorf("%s's ledger on index %d: %q (seen %v), want %q", p.name, index, got, ok, want)
		}
	}
}

// forgeries are commands acting for the victim's organisation: another
// organisation's cancel, set_limit, add_machine, machine_lost, task_ended.
func (f *forgeryFixture) forgeries() map[string]ledger.Command {
	v := f.victim
	env := ledger.Command{Org: v.org, Peer: v.node.ID().String()}
	with := func(set func(*ledger.Command)) ledger.Command { c := env; set(&c); return c }
	return map[string]ledger.Command{
		"cancel_task": with(func(c *ledger.Command) { c.CancelTask = &ledger.CancelTask{Task: v.org + "-2"} }),
		"set_limit":   with(func(c *ledger.Command) { c.SetLimit = &ledger.SetLimit{LimitMilliW: 1} }),
		"add_machine": with(func(c *ledger.Command) {
			c.AddMachine = &ledger.AddMachine{Machine: ledger.MachineSpec{Name: "evil", MFLOPS: ledger.MaxMFLOPS, BusyMilliW: 1}}
		}),
		"machine_lost": with(func(c *ledger.Command) { c.MachineLost = &ledger.MachineLostCmd{Machine: v.org + "/m1"} }),
		"task_ended": with(func(c *ledger.Command) {
			c.TaskEnded = &ledger.TaskEnded{Task: f.running, Machine: v.org + "/m0", EnergyMilliJ: ledger.MaxSegmentMilliJ, Source: ledger.EnergyRAPL}
		}),
	}
}

// TestMaliciousLeaderCannotActForAnotherOrg: the leader appends, without
// admission, commands claiming to be the victim's, unsigned or signed with
// its own key. Every peer's ledger refuses each with bad_signature and the
// state hash stays as it was.
func TestMaliciousLeaderCannotActForAnotherOrg(t *testing.T) {
	f := newForgeryFixture(t)
	for name, cmd := range f.forgeries() {
		for _, form := range []struct {
			name string
			key  crypto.PrivKey
		}{{"unsigned", nil}, {"signed by the leader", f.leader.host.PrivateKey()}} {
			t.Run(name+"/"+form.name, func(t *testing.T) {
				before := f.c.converge()
				res := appendAsLeader(t, f.leader, encodeAs(t, cmd, form.key))
				if res.Err == nil || res.Err.Code != ledger.CodeBadSignature {
					t.Fatalf("forged %s: %v, want bad_signature", name, res.Err)
				}
				f.refusedEverywhere(t, res.Index, ledger.CodeBadSignature, before)
			})
		}
	}
}

// TestLeaderCannotAlterAForwardedCommand: a command the victim signed,
// altered by the leader before it appends it (a limit of 900 W made 1 mW,
// a cancel moved to another task), is refused on every peer.
func TestLeaderCannotAlterAForwardedCommand(t *testing.T) {
	f := newForgeryFixture(t)
	cases := []struct {
		name     string
		cmd      ledger.Command
		from, to string
	}{
		{"set_limit", ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: 900_000}}, `"limit_mw":900000`, `"limit_mw":1`},
		{"cancel_task", ledger.Command{CancelTask: &ledger.CancelTask{Task: f.victim.org + "-2"}}, `"task":"` + f.victim.org + `-2"`, `"task":"` + f.running + `"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			genuine := command(f.victim, tc.cmd)
			altered := bytes.Replace(genuine, []byte(tc.from), []byte(tc.to), 1)
			if bytes.Equal(altered, genuine) {
				t.Fatalf("nothing altered in %s", genuine)
			}
			before := f.c.converge()
			res := appendAsLeader(t, f.leader, altered)
			if res.Err == nil || res.Err.Code != ledger.CodeBadSignature {
				t.Fatalf("altered %s: %v, want bad_signature", tc.name, res.Err)
			}
			f.refusedEverywhere(t, res.Index, ledger.CodeBadSignature, before)
		})
	}
	// The genuine command, forwarded unaltered, applies.
	if res := mustPropose(t, f.victim, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: 900_000}}); !res.Applied() {
		t.Fatalf("genuine set_limit: %v", res.Err)
	}
}

// TestMaliciousForwarderCannotActForAnotherOrg: a follower running
// modified code (it skips its own admission and sends straight to the
// leader's ProtoPropose) tries the same forgeries. A command claiming the
// victim's peer is refused by the leader's "acts as its sender" check
// (defence in depth: never appended, log and hash unchanged); one that
// names itself as peer but acts for the victim's organisation, signed, is
// refused by the leader's ledger dry run (not_owner) and an unsigned
// command of its own organisation, which signs, likewise (bad_signature):
// neither reaches the log (the appended case, where every ledger refuses
// it, is TestMaliciousLeaderCannotActForAnotherOrg's).
func TestMaliciousForwarderCannotActForAnotherOrg(t *testing.T) {
	f := newForgeryFixture(t)
	m := f.c.other(f.leader, f.victim)
	forward := func(t *testing.T, data []byte) (ledger.Result, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := m.host.Request(ctx, f.leader.node.ID(), consensus.ProtoPropose, data)
		if err != nil {
			return ledger.Result{}, err
		}
		var res ledger.Result
		if err := json.Unmarshal(resp, &res); err != nil {
			t.Fatalf("leader's answer: %v", err)
		}
		return res, nil
	}
	lastIndex := func() uint64 { return f.leader.node.Raft().LastIndex() }
	for name, cmd := range f.forgeries() {
		t.Run(name+"/as the victim's peer", func(t *testing.T) {
			before, last := f.c.converge(), lastIndex()
			_, err := forward(t, encodeAs(t, cmd, m.host.PrivateKey()))
			if p2p.Code(err) != consensus.CodeForbidden {
				t.Fatalf("forwarded forgery: %v, want %s", err, consensus.CodeForbidden)
			}
			if after := f.c.converge(); after != before || lastIndex() != last {
				t.Fatalf("a refused forward changed the log (%d → %d) or the state", last, lastIndex())
			}
		})
		if name == "machine_lost" {
			// Declaring another organisation's machine lost as oneself is
			// the leader's duty; admission refuses it from others.
			continue
		}
		t.Run(name+"/as itself for the victim's organisation", func(t *testing.T) {
			cmd.Peer = m.node.ID().String()
			before, last := f.c.converge(), lastIndex()
			res, err := forward(t, encodeAs(t, cmd, m.host.PrivateKey()))
			if err != nil {
				t.Fatal(err)
			}
			if res.Err == nil || res.Err.Code != ledger.CodeNotOwner {
				t.Fatalf("%v, want not_owner", res.Err)
			}
			if after := f.c.converge(); after != before || lastIndex() != last {
				t.Fatalf("a refused forward changed the log (%d → %d) or the state", last, lastIndex())
			}
		})
	}
	t.Run("unsigned own command of a signing organisation", func(t *testing.T) {
		before, last := f.c.converge(), lastIndex()
		c := ledger.Command{Org: m.org, Peer: m.node.ID().String(), SetLimit: &ledger.SetLimit{LimitMilliW: 1}}
		res, err := forward(t, encodeAs(t, c, nil))
		if err != nil {
			t.Fatal(err)
		}
		if res.Err == nil || res.Err.Code != ledger.CodeBadSignature {
			t.Fatalf("%v, want bad_signature", res.Err)
		}
		if after := f.c.converge(); after != before || lastIndex() != last {
			t.Fatalf("a refused forward changed the log (%d → %d) or the state", last, lastIndex())
		}
	})
}
