package consensus

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/hashicorp/raft"
)

// TestRejectedProposalNeverAppended: a command the ledger would reject,
// proposed on the leader or forwarded by a follower, is answered with the
// ledger's code and message and leaves the Raft log as it was; a malformed
// 4 MB command is refused before the ledger is asked. An accepted command
// still appends.
func TestRejectedProposalNeverAppended(t *testing.T) {
	c := newCluster(t, 3, 2, nil)
	leader := c.waitLeader()
	var f *tpeer
	for _, p := range c.peers {
		if p != leader {
			f = p
			break
		}
	}
	tasks := submit(t, f, 1)
	allocate(t, leader, tasks) // f's PI is now 100 W
	leaderTask := submit(t, leader, 1)[0]
	c.converge()
	eventually(t, 10*time.Second, func() error {
		if !leader.node.term.isCaughtUp() {
			return context.DeadlineExceeded
		}
		return nil
	})

	huge := ledger.Command{SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 1, Spec: ledger.Spec{Argv: []string{strings.Repeat("x", 4<<20)}}}}}}
	cases := []struct {
		name    string
		from    *tpeer
		cmd     ledger.Command
		code    ledger.Code // the ledger's verdict
		errCode string      // or a refusal before the ledger
	}{
		{"limit below PI, forwarded", f, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: 1}}, ledger.CodeLimitExceeded, ""},
		{"cancel of another organisation's task, forwarded", f, ledger.Command{CancelTask: &ledger.CancelTask{Task: leaderTask}}, ledger.CodeNotOwner, ""},
		{"cancel of another organisation's task, on the leader", leader, ledger.Command{CancelTask: &ledger.CancelTask{Task: tasks[0]}}, ledger.CodeNotOwner, ""},
		{"unknown machine", f, ledger.Command{Heartbeat: &ledger.Heartbeat{Machine: "nobody/m0"}}, ledger.CodeUnknownMachine, ""},
		{"malformed 4 MB submit", f, huge, "", CodeBadCommand},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hash := c.converge()
			before := c.waitLeader().node.Raft().LastIndex()
			data := rawCommand(tc.from, tc.cmd)
			var want *ledger.Error
			leader.node.View(func(l *ledger.Ledger) {
				if cmd, err := ledger.DecodeCommand(data); err == nil {
					want = l.Check(&cmd)
				}
			})
			res, err := tc.from.node.Propose(ctx, data)
			if tc.errCode != "" {
				if p2p.Code(err) != tc.errCode {
					t.Fatalf("propose: %v, want %s", err, tc.errCode)
				}
			} else {
				if err != nil {
					t.Fatalf("propose: %v", err)
				}
				if res.Err == nil || res.Err.Code != tc.code || want == nil || res.Err.Msg != want.Msg {
					t.Fatalf("result %+v, want code %s with the ledger's message %v", res, tc.code, want)
				}
			}
			time.Sleep(100 * time.Millisecond)
			if n := commandsAfter(t, c, before); n != 0 {
				t.Fatalf("%d command entries appended after index %d", n, before)
			}
			if h := c.converge(); h != hash {
				t.Fatal("the state changed")
			}
		})
	}
	before := c.waitLeader().node.Raft().LastIndex()
	if res := mustPropose(t, f, ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: 500_000}}); !res.Applied() {
		t.Fatalf("an acceptable command: %v", res.Err)
	}
	if n := commandsAfter(t, c, before); n != 1 {
		t.Fatalf("an accepted command: %d command entries appended", n)
	}
}

// commandsAfter counts the command entries the leader's log holds after
// index from. An election on a loaded machine appends entries of its own
// (a no-op, a barrier), which are not commands.
func commandsAfter(t *testing.T, c *cluster, from uint64) int {
	t.Helper()
	l := c.waitLeader()
	n := 0
	for i := from + 1; i <= l.node.Raft().LastIndex(); i++ {
		var e raft.Log
		if err := l.node.logs.GetLog(i, &e); err != nil {
			t.Fatalf("log entry %d: %v", i, err)
		}
		if e.Type == raft.LogCommand {
			n++
		}
	}
	return n
}

// rawCommand encodes c for p without the encoder's shape checks, as a
// buggy or hostile peer would send it.
func rawCommand(p *tpeer, c ledger.Command) []byte {
	p.tb.Helper()
	c.V, c.Org, c.Peer, c.AtMs = ledger.CommandVersion, p.org, p.node.ID().String(), time.Now().UnixMilli()
	b, err := json.Marshal(c)
	if err != nil {
		p.tb.Fatal(err)
	}
	return b
}
