package consensus

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// Benchmarks run real 3-voter clusters on loopback: libp2p hosts with the
// private network, go-libp2p-raft transport, bolt stores with fsync, and the
// ledger as state machine.

// BenchmarkCommitEntries measures committed entries per second: small
// commands (heartbeats) proposed through the public Propose API, by 1 or
// 64 concurrent proposers, on the leader or forwarded by a follower.
func BenchmarkCommitEntries(b *testing.B) {
	for _, bc := range []struct {
		name      string
		proposers int
		follower  bool
	}{
		{"leader/1-proposer", 1, false},
		{"leader/64-proposers", 64, false},
		{"follower/64-proposers", 64, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			leader, followers := benchCluster(b, 3)
			p := leader
			if bc.follower {
				p = followers[0]
			}
			cmd := command(p, ledger.Command{Heartbeat: &ledger.Heartbeat{Machine: p.org + "/m0"}})
			elapsed := proposeConcurrently(b, slices.Repeat([]proposal{{p.node, cmd}}, bc.proposers))
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "entries/s")
		})
	}
}

// BenchmarkDecisionBatches measures committed decisions per second when a
// scheduling pass of N decisions is one log entry, committed one after the
// other as the leader's loop does. Each entry swaps the tasks on N machines
// (N preemptions), so every decision is validated and applied by all three
// ledgers.
func BenchmarkDecisionBatches(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("batch-%d", n), func(b *testing.B) {
			leader, _ := benchCluster(b, 3)
			a, bb := prepareSwap(b, leader, n)
			cmds := [2][]byte{
				decisionsCommand(b, leader, bb, a), // place set b, evicting a
				decisionsCommand(b, leader, a, bb), // and back
			}
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				res, err := leader.node.applyLocal(ctx, cmds[i%2])
				if err != nil {
					b.Fatal(err)
				}
				if got := res.AcceptedDecisions(); got != n {
					b.Fatalf("entry %d: %d of %d decisions accepted (%v)", i, got, n, res.Decisions[0].Err)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N*n)/elapsed.Seconds(), "decisions/s")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "entries/s")
		})
	}
}

type swapSet struct{ machines, tasks []string }

// prepareSwap registers n machines (over helper organisations of up to
// ledger.MaxMachinesPerCommand machines, acting through made-up peer IDs,
// which only an in-package benchmark can propose) and 2n tasks of the
// leader's organisation, and places the first n.
func prepareSwap(b *testing.B, leader *tpeer, n int) (first, second swapSet) {
	b.Helper()
	ctx := context.Background()
	apply := func(c ledger.Command) ledger.Result {
		c.V = ledger.CommandVersion
		c.AtMs = time.Now().UnixMilli()
		data, err := ledger.EncodeCommand(c)
		if err != nil {
			b.Fatal(err)
		}
		res, err := leader.node.applyLocal(ctx, data)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Applied() {
			b.Fatalf("%s: %v", res.Kind, res.Err)
		}
		return res
	}
	apply(ledger.Command{Org: leader.org, Peer: leader.node.ID().String(), SetLimit: &ledger.SetLimit{LimitMilliW: ledger.MaxLimitMilliW}})
	var machines []string
	for h := 0; len(machines) < n; h++ {
		org := fmt.Sprintf("helper%d", h)
		var specs []ledger.MachineSpec
		for i := 0; i < ledger.MaxMachinesPerCommand && len(machines) < n; i++ {
			specs = append(specs, ledger.MachineSpec{Name: fmt.Sprintf("m%d", i), MFLOPS: 1000, BusyMilliW: 1000})
			machines = append(machines, fmt.Sprintf("%s/m%d", org, i))
		}
		apply(ledger.Command{Org: org, Peer: "12D3KooWhelper" + fmt.Sprint(h), RegisterOrg: &ledger.RegisterOrg{LimitMilliW: 1, Machines: specs}})
	}
	var tasks []string
	for len(tasks) < 2*n {
		k := min(2*n-len(tasks), ledger.MaxTasksPerCommand)
		specs := make([]ledger.TaskSpec, k)
		for i := range specs {
			specs[i] = ledger.TaskSpec{SizeMFlop: 1000}
		}
		res := apply(ledger.Command{Org: leader.org, Peer: leader.node.ID().String(), SubmitTasks: &ledger.SubmitTasks{Tasks: specs}})
		tasks = append(tasks, res.TaskIDs...)
	}
	first = swapSet{machines: machines, tasks: tasks[:n]}
	second = swapSet{machines: machines, tasks: tasks[n:]}
	var ds []ledger.Decision
	for i, m := range machines {
		ds = append(ds, ledger.Decision{Kind: ledger.DecideAllocate, Task: first.tasks[i], Machine: m})
	}
	for len(ds) > 0 {
		k := min(len(ds), ledger.MaxDecisionsPerCommand)
		apply(ledger.Command{Org: leader.org, Peer: leader.node.ID().String(), Decisions: &ledger.Decisions{Decisions: ds[:k]}})
		ds = ds[k:]
	}
	return first, second
}

// decisionsCommand preempts the tasks of from on each machine for those of
// to.
func decisionsCommand(b *testing.B, leader *tpeer, to, from swapSet) []byte {
	b.Helper()
	ds := make([]ledger.Decision, len(to.machines))
	for i, m := range to.machines {
		ds[i] = ledger.Decision{Kind: ledger.DecidePreempt, Task: to.tasks[i], Machine: m, Victim: from.tasks[i]}
	}
	data, err := ledger.EncodeCommand(ledger.Command{
		V: ledger.CommandVersion, Org: leader.org, Peer: leader.node.ID().String(), AtMs: time.Now().UnixMilli(),
		Decisions: &ledger.Decisions{Decisions: ds},
	})
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkSparseCommit measures the latency of one command proposed
// through a follower of four after a pause longer than CommitTimeout (the
// followers' replication loops are then parked in paced idle appends,
// pacing.go): the commit latency a federation sees between bursts.
func BenchmarkSparseCommit(b *testing.B) {
	_, followers := benchCluster(b, 4)
	p := followers[0]
	cmd := command(p, ledger.Command{Heartbeat: &ledger.Heartbeat{Machine: p.org + "/m0"}})
	ctx := context.Background()
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		res, err := p.node.Propose(ctx, cmd)
		if err == nil && !res.Applied() {
			err = res.Err
		}
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/commit")
}

// BenchmarkFollowerCommitCPU measures the CPU time (user and system, of
// the whole test process: the four peers of the cluster) per command
// committed when 16 proposers on each of the three followers propose one
// command at a time, as the owners' reports do in make bench-e2e B. CPU
// time, unlike the rate, depends little on what else runs on the machine.
func BenchmarkFollowerCommitCPU(b *testing.B) {
	_, followers := benchCluster(b, 4)
	var proposals []proposal
	for _, p := range followers {
		cmd := command(p, ledger.Command{Heartbeat: &ledger.Heartbeat{Machine: p.org + "/m0"}})
		proposals = append(proposals, slices.Repeat([]proposal{{p.node, cmd}}, 16)...)
	}
	cpu0 := processCPU(b)
	elapsed := proposeConcurrently(b, proposals)
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/commit")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
}

// benchCluster is a running cluster of size voters without the invariant
// checks (their cost is not the replication's): its leader and the
// others.
func benchCluster(b *testing.B, size int) (leader *tpeer, followers []*tpeer) {
	b.Helper()
	c := newCluster(b, size, 1, func(cfg *Config) { cfg.CheckInvariants = false })
	leader = c.waitLeader()
	for _, p := range c.peers {
		if p != leader {
			followers = append(followers, p)
		}
	}
	return leader, followers
}

// proposal is one concurrent proposer: the node it proposes through and
// the command it proposes again and again.
type proposal struct {
	node *Node
	cmd  []byte
}

// proposeConcurrently runs one goroutine per proposal, proposing b.N
// commands between them (each takes the next as soon as its previous one
// is applied), and returns the time they took, which the benchmark's
// timer also counts alone. The first failure or refusal fails b.
func proposeConcurrently(b *testing.B, proposals []proposal) time.Duration {
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		next = make(chan struct{})
		errs = make(chan error, len(proposals))
	)
	b.ResetTimer()
	start := time.Now()
	for _, p := range proposals {
		wg.Add(1)
		go proposeEach(ctx, &wg, p.node, p.cmd, next, errs)
	}
	for range b.N {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	return elapsed
}

// processCPU is the CPU time this process used so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// proposeEach proposes cmd once for every value received on next, and
// sends the first failure (or refusal) to errs.
func proposeEach(ctx context.Context, wg *sync.WaitGroup, n *Node, cmd []byte, next <-chan struct{}, errs chan<- error) {
	defer wg.Done()
	for range next {
		res, err := n.Propose(ctx, cmd)
		if err == nil && !res.Applied() {
			err = res.Err
		}
		if err != nil {
			errs <- err
			return
		}
	}
}
