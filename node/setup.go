package node

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
)

// ErrNoWayToJoin is returned by Start for a peer that is not a member, has
// no bootstrap address and no known peers, and was not initialised to
// start a new federation.
var ErrNoWayToJoin = errors.New("not a member of a federation and no way to join one: pass --bootstrap MULTIADDR (the /p2p/ address another peer prints) and --invitation FILE|TOKEN (from a member: peer invite ORG)")

// becomeMember makes this peer a member of the federation, following the
// rule of docs/CONFIG.md ("Start-up"):
//
//   - Raft state on disk: resume. Dial the known peers (and any bootstrap
//     address) so the members find this peer again; nothing else.
//   - No Raft state and a bootstrap address: join through it.
//   - No Raft state, no bootstrap address, known peers (a join that did
//     not complete, or Raft state deleted): join through them.
//   - Otherwise, only a peer initialised with --new-federation bootstraps
//     a one-member federation. Any other peer refuses to start: a second
//     federation must never be created by accident.
//
// progress is called when the join makes progress (a paced admission: the
// leader has this peer in its queue).
func (n *Node) becomeMember(ctx context.Context, flagBootstrap []string, progress func()) error {
	bootstrap := append(slices.Clone(flagBootstrap), n.cfg.Bootstrap...)
	has, err := n.cons.HasState()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if has {
		k := n.host.ConnectKnown(ctx)
		for _, a := range bootstrap {
			if _, err := n.host.ConnectAddr(ctx, a); err != nil {
				n.log.Info("bootstrap address unreachable", "addr", a, "err", err)
			}
		}
		n.log.Info("resuming from the data directory", "known_peers_reached", k)
		return nil
	}
	if len(bootstrap) == 0 {
		bootstrap = n.knownAddrs()
	}
	if len(bootstrap) > 0 {
		res, err := n.joinPatiently(ctx, bootstrap, progress)
		if err != nil {
			return fmt.Errorf("join the federation: %w", err)
		}
		n.log.Info("joined the federation", "via", res.Via, "leader", res.Leader, "voter", res.Voter, "members", len(res.Members))
		return nil
	}
	if !n.cfg.NewFederation {
		return ErrNoWayToJoin
	}
	if err := n.cons.Bootstrap(); err != nil {
		return fmt.Errorf("start a new federation: %w", err)
	}
	n.log.Info("started a new federation")
	return nil
}

// joinAttemptTimeout bounds one attempt to join: a join refused for a
// reason that passes (no leader, an election, no answer in time while the
// leader admits other joiners one at a time) is sent again until the
// join's own deadline (Options.JoinTimeout). Sending it again is safe: the
// leader answers a peer already in the configuration with its suffrage
// and records an invitation's admission once (consensus.Join). A forming
// federation of a hundred peers on one host met all of these, and a
// joiner whose one request waited out the whole join timeout for an
// answer gave up, leaving its half-done join behind (docs/BENCHMARKS.md).
const joinAttemptTimeout = 20 * time.Second

// joinRetryMax bounds the backoff between two join attempts: a joiner the
// leader paces asks again at most this long after (and at least as often),
// so that a queue of joiners costs the leader a few requests a second.
const joinRetryMax = 5 * time.Second

// joinPatiently joins the federation through bootstrap, trying again
// while the failure is one that passes, until ctx ends. A paced admission
// (consensus.CodeAdmissionPaced: the leader admits others first) is
// waited for and reported to progress.
func (n *Node) joinPatiently(ctx context.Context, bootstrap []string, progress func()) (consensus.JoinResult, error) {
	attempt, paced := 0, 0
	var last error
	b := backoff.NewExponentialBackOff()
	b.MaxInterval = joinRetryMax
	res, err := backoff.Retry(ctx, func() (consensus.JoinResult, error) {
		attempt++
		actx, acancel := context.WithTimeout(ctx, joinAttemptTimeout)
		defer acancel()
		res, err := n.cons.Join(actx, n.opts.Invitation, bootstrap...)
		last = err
		switch {
		case err == nil:
			return res, nil
		case ctx.Err() != nil || !joinRetryable(err):
			return res, backoff.Permanent(err)
		case p2p.Code(err) == consensus.CodeAdmissionPaced:
			if paced++; paced == 1 {
				n.log.Info("the leader admits other peers first; waiting for this peer's turn", "err", err)
			}
			progress()
			return res, err
		}
		n.log.Warn("join failed; trying again", "attempt", attempt, "err", err)
		return res, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	if paced > 0 && err == nil {
		n.log.Info("admitted after waiting for this peer's turn", "paced_answers", paced)
	}
	if err != nil && ctx.Err() != nil && last != nil {
		// Out of time: the last attempt says why.
		return res, last
	}
	return res, err
}

// joinRetryable says whether a failed join may succeed if sent again: the
// federation had no leader or was electing one, the answer did not come
// in time, or the bootstrap peer could not be dialled (a loaded host
// times out the security handshake).
func joinRetryable(err error) bool {
	var dial *swarm.DialError
	return consensus.Retryable(err) || p2p.Code(err) == p2p.CodeTimeout || errors.As(err, &dial)
}

// knownAddrs turns the known peers into bootstrap addresses.
func (n *Node) knownAddrs() []string {
	var out []string
	for _, kp := range n.host.KnownPeers() {
		for _, a := range kp.Addrs {
			out = append(out, a.String()+"/p2p/"+kp.ID.String())
		}
	}
	return out
}

// setup runs in the background after Start: it waits for a leader,
// registers the organisation (or reconciles its machines with the config),
// then starts the executor bridge and the heartbeats. Transient failures
// (no leader yet, a leader change) are retried; a conflict over who owns
// the organisation stops the node.
func (n *Node) setup() {
	defer n.wg.Done()
	backoff := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := n.register(n.ctx)
		if err == nil {
			break
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			n.log.Error("cannot take part in the federation", "err", err)
			n.stop(err)
			return
		}
		if n.ctx.Err() != nil {
			return
		}
		lvl := "waiting for the federation"
		if attempt%10 == 0 {
			n.log.Warn(lvl, "attempt", attempt, "err", err)
		} else {
			n.log.Debug(lvl, "attempt", attempt, "err", err)
		}
		n.rejoinIfRemoved()
		if !sleep(n.ctx, backoff) {
			return
		}
		backoff = min(backoff*2, 3*time.Second)
	}
	// Catch up before serving: a peer restarted from its data directory
	// holds only what it had applied when it stopped, and a read served
	// from that would go back in time (the chaos harness saw a task read
	// done, then not_found from the restarted peer, then done). A consistent
	// read waits until the local ledger has applied what the leader had
	// committed when asked.
	for backoff := 200 * time.Millisecond; ; backoff = min(backoff*2, 3*time.Second) {
		err := n.cons.ReadConsistent(n.ctx, func(*ledger.Ledger) {})
		if err == nil {
			break
		}
		if n.ctx.Err() != nil {
			return
		}
		n.log.Debug("catching up with the federation", "err", err)
		if !sleep(n.ctx, backoff) {
			return
		}
	}
	n.runner.Start()
	n.followAvailability()
	n.watchLoad() // load.go
	close(n.ready)
	n.gossip.PublishNow()
	n.log.Info("ready", "machines", len(n.machines))
	releaseStartGarbage()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.keepRetention(n.ctx)
	}()
}

// startGarbageFloor is the heap below which the start's garbage is left
// to the runtime (releaseStartGarbage).
const startGarbageFloor = 64 << 20

// releaseStartGarbage returns the start's garbage to the system at once
// when the heap is large. A restore and replay decode megabytes that are
// garbage by the time the peer is ready; the runtime would keep that heap
// for minutes before its scavenger returned it. Returned at once, the RSS
// after a restart is the state's (issue 17: 97 MiB anonymous after a
// restart at 100,000 finished tasks, 57 after one collection;
// docs/BENCHMARKS.md). A small heap (a new peer of a young federation: 20
// MiB) is not worth the forced collection, which was about a twentieth
// of a joiner's CPU until ready (docs/BENCHMARKS.md, "Forming 100 peers,
// session 10").
func releaseStartGarbage() {
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	rtmetrics.Read(s)
	var heap uint64
	for _, v := range s {
		if v.Value.Kind() == rtmetrics.KindUint64 {
			heap += v.Value.Uint64()
		}
	}
	if heap >= startGarbageFloor {
		debug.FreeOSMemory()
	}
}

type fatalError struct{ msg string }

func (e *fatalError) Error() string { return e.msg }

// rejoinIfRemoved joins again through the known peers when this peer's own
// Raft configuration no longer lists it (it left, or was removed, and was
// started again from its old data directory).
func (n *Node) rejoinIfRemoved() {
	members, err := n.cons.Members()
	if err != nil || len(members) == 0 {
		return
	}
	for _, m := range members {
		if m.ID == n.self {
			return
		}
	}
	addrs := append(slices.Clone(n.opts.Bootstrap), n.cfg.Bootstrap...)
	addrs = append(addrs, n.knownAddrs()...)
	if len(addrs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	if _, err := n.cons.Join(ctx, n.opts.Invitation, addrs...); err != nil {
		n.log.Debug("rejoin", "err", err)
	}
}

// register makes sure the organisation is registered to this peer with the
// configured machines.
func (n *Node) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := n.cons.WaitLeader(ctx); err != nil {
		return err
	}
	var (
		org     ledger.OrgInfo
		exists  bool
		peerOrg string
		hasOrg  bool
		first   bool
	)
	read := func() error {
		return n.cons.ReadConsistent(ctx, func(l *ledger.Ledger) {
			org, exists = l.Org(n.org)
			peerOrg, hasOrg = l.OrgOfPeer(n.self.String())
			first = len(l.Orgs()) == 0
		})
	}
	if err := read(); err != nil {
		return err
	}
	if hasOrg && peerOrg != n.org {
		return &fatalError{fmt.Sprintf("this peer (%s) is registered for organisation %q, but config.yaml says %q", n.self, peerOrg, n.org)}
	}
	if exists && org.Peer != n.self.String() {
		return &fatalError{fmt.Sprintf("organisation %q is registered to another peer (%s); each organisation has one peer", n.org, org.Peer)}
	}
	if !exists {
		var specs []ledger.MachineSpec
		var power int64
		for _, name := range n.machineNames() {
			m := n.machines[name]
			specs = append(specs, n.machineSpec(m))
			power += m.BusyMilliW()
		}
		lim := n.limit.MilliWatts(power)
		rules := n.executorRules(first, len(specs) > 0)
		_, err := n.propose(ctx, func(c *ledger.Command) {
			c.RegisterOrg = &ledger.RegisterOrg{LimitMilliW: lim, Machines: specs, Rules: rules}
		})
		if ledger.CodeOf(err) == ledger.CodeExecutorMode {
			return &fatalError{fmt.Sprintf("register %s: %v (executor.kind in config.yaml must match the federation's executors)", n.org, err)}
		}
		if err != nil {
			// On CodeExists (registered meanwhile: a retry after an
			// unknown outcome, or someone else) the next attempt reads
			// again and checks who holds it.
			return fmt.Errorf("register %s: %w", n.org, err)
		}
		n.log.Info("organisation registered", "machines", len(specs), "limit_w", float64(lim)/1000)
		return nil
	}
	if !org.Signing {
		if err := n.adoptSigning(ctx, org.LimitMilliW); err != nil {
			return err
		}
	}
	return n.reconcileMachines(ctx)
}

// adoptSigning makes an organisation registered before signed commands
// signing at once, on the first start of its upgraded peer, rather than
// whenever it next proposes something: a signed set_limit to the limit it
// already has changes nothing else, and from then on every peer refuses
// an unsigned command acting for it (ledger/sign.go). Nothing of this
// organisation is proposed concurrently: the API is not ready yet.
func (n *Node) adoptSigning(ctx context.Context, limitMilliW int64) error {
	if _, err := n.propose(ctx, func(c *ledger.Command) { c.SetLimit = &ledger.SetLimit{LimitMilliW: limitMilliW} }); err != nil {
		return fmt.Errorf("sign for %s: %w", n.org, err)
	}
	n.log.Info("organisation now signs its commands: unsigned commands acting for it are refused")
	return nil
}

// executorRules is what this peer's registration declares (docs/SECURITY.md,
// "Executors"): its executors, live or simulated (executor.kind: sim), which
// on the federation's first registration fix the federation's rules with
// the default queue cap and the scheduling settings every peer computes
// the passes with (consensus.policy and consensus.checkpoint_block of the
// first peer's config.yaml; docs/SECURITY.md, "Member leader"). A peer
// offering no machines runs no executor: it declares nothing unless it is
// the first.
func (n *Node) executorRules(first, hasMachines bool) *ledger.Rules {
	if !first && !hasMachines {
		return nil
	}
	mode := ledger.ExecutorsLive
	if n.cfg.Executor.Kind == "sim" {
		mode = ledger.ExecutorsSimulated
	}
	r := &ledger.Rules{Executors: mode}
	if first {
		r.RunBounds = true
		r.Scheduling = &ledger.Scheduling{
			Policy:            n.cfg.Consensus.Policy,
			CheckpointBlockMs: n.cfg.Consensus.CheckpointBlock.Milliseconds(),
		}
		r.Retention = retentionRule(n.cfg.Consensus)
	}
	return r
}

// machineSpec is how this peer declares one of its machines: its figures,
// and whether its tasks run unprotected (with this peer's own user), which
// every member then sees in `peer machines`.
//
// Its resources and labels come from the machines file, its OS and
// architecture are this host's, and its owner policy is what this peer's
// executor enforces (ownerPolicy).
func (n *Node) machineSpec(m executor.MachineConfig) ledger.MachineSpec {
	spec := ledger.MachineSpec{Name: m.Name, MFLOPS: m.MFLOPS(), BusyMilliW: m.BusyMilliW(), IdleMilliW: m.IdleMilliW(), Unprotected: n.unprotected, Opportunistic: m.Opportunistic}
	spec.MachineResources = ledger.MachineResources{CPUs: m.CPUs, MemoryBytes: m.MemoryBytes, GPUs: m.GPUs,
		OS: runtime.GOOS, Arch: runtime.GOARCH, Owner: n.owner}
	if len(m.Labels) > 0 {
		spec.Labels = ledger.SortLabels(m.Labels)
	}
	return spec
}

// ledgerSpec is how the ledger holds m's declaration, to compare with
// what this peer would declare now.
func ledgerSpec(m ledger.Machine) ledger.MachineSpec {
	return ledger.MachineSpec{Name: m.Name, MFLOPS: m.MFLOPS, BusyMilliW: m.BusyMilliW, IdleMilliW: m.IdleMilliW, Unprotected: m.Unprotected, MachineResources: m.MachineResources, Opportunistic: m.Opportunistic}
}

// ownerPolicy is the part of the executor's policy the scheduler must
// know. A process executor enforces the allowed executables and the
// wall-clock cap, so they are declared; a simulated executor runs anything,
// so only the organisations it admits are (nil when it admits all).
func ownerPolicy(kind string, p executor.Policy) *ledger.OwnerPolicy {
	if kind == "sim" {
		if len(p.Orgs) == 0 {
			return nil
		}
		return &ledger.OwnerPolicy{AllowAny: true, Orgs: slices.Clone(p.Orgs)}
	}
	o := &ledger.OwnerPolicy{AllowAny: p.AllowAny, Orgs: slices.Clone(p.Orgs), MaxWallMs: p.MaxWallClock.Milliseconds()}
	if !p.AllowAny {
		o.Allow = slices.Clone(p.Allow)
	}
	return o
}

func (n *Node) machineNames() []string {
	names := make([]string, 0, len(n.machines))
	for name := range n.machines {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// machineHosts maps the machines that declare a host (machines file) to
// it, for a parallel job's host list.
func (n *Node) machineHosts() map[string]string {
	hosts := map[string]string{}
	for name, m := range n.machines {
		if m.Host != "" {
			hosts[name] = m.Host
		}
	}
	return hosts
}

// reconcileMachines runs at every start of a registered peer. Its executor
// runs nothing yet, so every run the ledger records on this peer's
// machines is an orphan of the previous run of the daemon, unless the
// executor can adopt it (a Slurm job that outlived the daemon):
//
//   - a machine holding a running task, or a stopped run whose energy was
//     never reported, is declared lost (MachineLost): its task goes back to
//     the queue and the open segments are closed with the declared-power
//     estimate. The heartbeat loop then brings it back up (Heartbeat);
//   - a machine that is no longer in the machines file is declared lost if
//     it holds anything, then removed; one whose declaration changed
//     (GFLOPS, watts, protection, resources, labels, owner policy) is
//     removed and added again with the new figures;
//   - a machine of the file that the ledger lacks is added.
//
// Tasks only assigned (not started) are left alone: the bridge starts them.
func (n *Node) reconcileMachines(ctx context.Context) error {
	var (
		mine    []ledger.Machine
		stopped = map[string]bool{}
		running = map[string]bool{}
		// leftovers: task → machine name of the runs the executor could
		// adopt.
		leftovers = map[string]string{}
	)
	if a, ok := n.exec.(interface{ Leftovers() map[string]string }); ok {
		leftovers = a.Leftovers()
	}
	err := n.cons.ReadConsistent(ctx, func(l *ledger.Ledger) {
		for _, m := range l.Machines() {
			if m.Org == n.org {
				mine = append(mine, m)
			}
		}
		for _, s := range l.PendingStops(n.org) {
			stopped[s.Machine] = true
		}
		for _, a := range l.Allocations(n.org) {
			// A run the executor can adopt (a Slurm job that outlived
			// the previous daemon, on the machine the ledger says) is no
			// orphan: the runner takes it over (runner/adopt.go).
			if a.Task.State == ledger.TaskRunning && leftovers[a.Task.ID] != a.Machine.Name {
				running[a.Machine.ID] = true
			}
		}
	})
	if err != nil {
		return err
	}
	inLedger := map[string]bool{}
	for _, m := range mine {
		inLedger[m.Name] = true
		want, configured := n.machines[m.Name]
		// A changed protection re-registers the machine too, so that the
		// ledger never shows a machine safer than it is.
		// So does a change of resources, labels or owner policy (and the
		// first start after an upgrade that declares them).
		changed := configured && !reflect.DeepEqual(n.machineSpec(want), ledgerSpec(m))
		orphan := running[m.ID] || stopped[m.ID]
		if m.State == ledger.MachineUp && (orphan || ((!configured || changed) && m.Task != "")) {
			if err := n.declareLost(ctx, m.ID); err != nil {
				return err
			}
			n.log.Info("machine declared lost: its run did not survive the restart", "machine", m.ID)
		}
		if !configured || changed {
			if _, err := n.propose(ctx, func(c *ledger.Command) { c.RemoveMachine = &ledger.RemoveMachine{Machine: m.ID} }); err != nil {
				return fmt.Errorf("remove machine %s: %w", m.ID, err)
			}
			n.log.Info("machine removed", "machine", m.ID, "reason", map[bool]string{true: "changed in the machines file", false: "no longer in the machines file"}[changed])
		}
		if changed {
			spec := n.machineSpec(want)
			if _, err := n.propose(ctx, func(c *ledger.Command) { c.AddMachine = &ledger.AddMachine{Machine: spec} }); err != nil {
				return fmt.Errorf("add machine %s: %w", m.ID, err)
			}
		}
	}
	for _, name := range n.machineNames() {
		if inLedger[name] {
			continue
		}
		m := n.machines[name]
		spec := n.machineSpec(m)
		if _, err := n.propose(ctx, func(c *ledger.Command) { c.AddMachine = &ledger.AddMachine{Machine: spec} }); err != nil && ledger.CodeOf(err) != ledger.CodeExists {
			return fmt.Errorf("add machine %s/%s: %w", n.org, name, err)
		}
		n.log.Info("machine added", "machine", n.org+"/"+name)
	}
	return nil
}

// declareLost proposes MachineLost for one of this peer's machines; a
// machine already lost is fine.
func (n *Node) declareLost(ctx context.Context, machine string) error {
	_, err := n.propose(ctx, func(c *ledger.Command) { c.MachineLost = &ledger.MachineLostCmd{Machine: machine} })
	if err != nil && ledger.CodeOf(err) != ledger.CodeBadState {
		return fmt.Errorf("declare %s lost: %w", machine, err)
	}
	return nil
}

// bringUp proposes Heartbeat for this peer's configured machines that the
// ledger holds as lost.
func (n *Node) bringUp(ctx context.Context) {
	var lost []string
	n.cons.View(func(l *ledger.Ledger) {
		for _, m := range l.Machines() {
			if m.Org == n.org && m.State == ledger.MachineLost {
				if _, ok := n.machines[m.Name]; ok {
					lost = append(lost, m.ID)
				}
			}
		}
	})
	for _, id := range lost {
		if _, err := n.propose(ctx, func(c *ledger.Command) { c.Heartbeat = &ledger.Heartbeat{Machine: id} }); err != nil {
			n.log.Debug("bring machine up", "machine", id, "err", err)
			continue
		}
		n.log.Info("machine up again", "machine", id)
	}
}

// gossipMember is gossip's membership check (gossip.Config.IsMember): its
// validator runs only once gossip joined, after consensus started.
func (n *Node) gossipMember(p peer.ID) bool { return n.cons != nil && n.cons.IsMember(p) }

// gossipLeader is whom this peer's heartbeats go to (gossip.Config.Leader):
// the leader as this replica knows it.
func (n *Node) gossipLeader() (peer.ID, bool) {
	if n.cons == nil {
		return "", false
	}
	return n.cons.Leader()
}

// gossipMembers is the federation's size for gossip's intervals
// (gossip.Config.Members): the members of the Raft configuration, 0 while
// none is known.
func (n *Node) gossipMembers() int {
	if n.cons == nil {
		return 0
	}
	return n.cons.MemberCount()
}

// isMember reports whether p is in the Raft configuration.
func (n *Node) isMember(p peer.ID) bool {
	members, err := n.cons.Members()
	if err != nil {
		return false
	}
	for _, m := range members {
		if m.ID == p {
			return true
		}
	}
	return false
}

// peerOfOrg returns the peer registered for org in the local view.
func (n *Node) peerOfOrg(org string) (peer.ID, error) {
	var s string
	n.cons.View(func(l *ledger.Ledger) {
		if o, ok := l.Org(org); ok {
			s = o.Peer
		}
	})
	if s == "" {
		return "", fmt.Errorf("organisation %q is not registered", org)
	}
	id, err := peer.Decode(s)
	if err != nil {
		return "", fmt.Errorf("organisation %q: peer %q: %w", org, s, err)
	}
	return id, nil
}
