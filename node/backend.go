package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// This file implements api.Backend. Reads are local (possibly a little
// stale) except where noted; writes go through the leader and map the
// ledger's and the consensus layer's codes to the API's (apiError).

// statusReadTimeout bounds the consistent read behind Status' leader.
const statusReadTimeout = 2 * time.Second

// Status describes this peer, the federation and every organisation. The
// leader is confirmed by a consistent read; "" if none answers in time.
func (n *Node) Status(ctx context.Context) (api.Status, error) {
	st := api.Status{Self: n.self.String(), Org: n.org, Peers: []api.PeerView{}, Orgs: []api.OrgView{}}
	rctx, cancel := context.WithTimeout(ctx, statusReadTimeout)
	err := n.cons.ReadConsistent(rctx, func(*ledger.Ledger) {})
	cancel()
	if err == nil {
		if id, ok := n.cons.Leader(); ok {
			st.Leader = id.String()
		}
	}
	st.Raft.State = n.cons.Raft().State().String()
	st.Raft.StateHash, st.Raft.AppliedIndex = n.cons.Hash()
	members, err := n.cons.Members()
	if err != nil {
		return api.Status{}, apiError(err)
	}
	n.cons.View(func(l *ledger.Ledger) {
		for _, m := range members {
			pv := api.PeerView{ID: m.ID.String(), Voter: m.Voter, Leader: m.ID.String() == st.Leader, Addrs: []string{}}
			pv.Org, _ = l.OrgOfPeer(m.ID.String())
			for _, a := range m.Addrs {
				pv.Addrs = append(pv.Addrs, a.String())
			}
			st.Peers = append(st.Peers, pv)
		}
		st.Orgs = orgViews(l.Orgs())
	})
	return st, nil
}

func orgViews(os []ledger.OrgInfo) []api.OrgView {
	out := make([]api.OrgView, 0, len(os))
	for _, o := range os {
		out = append(out, orgView(o))
	}
	return out
}

func orgView(o ledger.OrgInfo) api.OrgView {
	v := api.OrgView{
		Name:         o.Name,
		Peer:         o.Peer,
		Machines:     o.Machines,
		QuotaGFLOPS:  float64(o.QuotaMFLOPS) / 1000,
		PowerQuotaW:  float64(o.PowerQuotaMilliW) / 1000,
		LimitW:       float64(o.LimitMilliW) / 1000,
		PIW:          float64(o.PIMilliW) / 1000,
		AllocGFLOPS:  float64(o.AllocatedMFLOPS) / 1000,
		Queued:       o.Queued,
		Running:      o.Assigned + o.Running,
		Done:         o.Done,
		Failed:       o.Failed,
		Cancelled:    o.Cancelled,
		EnergyJ:      float64(o.Energy.UserMilliJ) / 1000,
		OwnerEnergyJ: float64(o.Energy.OwnerMilliJ()) / 1000,
	}
	if o.DP != nil {
		dp := *o.DP
		v.DP = &dp
	}
	return v
}

// Orgs lists the organisations in registration order.
func (n *Node) Orgs(ctx context.Context) ([]api.OrgView, error) {
	if err := n.requireReady(); err != nil {
		return nil, err
	}
	var out []api.OrgView
	n.cons.View(func(l *ledger.Ledger) { out = orgViews(l.Orgs()) })
	return out, nil
}

// Machines lists every machine; the last heartbeat is the later of the
// ledger's record and the gossip this peer heard.
func (n *Node) Machines(ctx context.Context) ([]api.MachineView, error) {
	if err := n.requireReady(); err != nil {
		return nil, err
	}
	var ms []ledger.Machine
	n.cons.View(func(l *ledger.Ledger) { ms = l.Machines() })
	out := make([]api.MachineView, 0, len(ms))
	for _, m := range ms {
		out = append(out, api.MachineView{
			ID:              m.ID,
			Org:             m.Org,
			GFLOPS:          float64(m.MFLOPS) / 1000,
			BusyW:           float64(m.BusyMilliW) / 1000,
			IdleW:           float64(m.IdleMilliW) / 1000,
			State:           string(m.State),
			Task:            m.Task,
			LastHeartbeatMs: max(m.LastHeartbeatMs, n.gossip.LastHeartbeatMs(m.ID)),
		})
	}
	return out, nil
}

var taskStates = []ledger.TaskState{ledger.TaskQueued, ledger.TaskAssigned, ledger.TaskRunning, ledger.TaskDone, ledger.TaskFailed, ledger.TaskCancelled}

// Tasks lists tasks by submit order; q.Limit keeps the first ones.
func (n *Node) Tasks(ctx context.Context, q api.TaskQuery) ([]api.TaskView, error) {
	if err := n.requireReady(); err != nil {
		return nil, err
	}
	f := ledger.TaskFilter{Org: q.Org}
	for _, s := range q.States {
		st := ledger.TaskState(s)
		if !slices.Contains(taskStates, st) {
			return nil, api.Errorf(api.CodeBadRequest, "state %q: want one of queued, assigned, running, done, failed, cancelled", s)
		}
		f.States = append(f.States, st)
	}
	if q.Limit < 0 {
		return nil, api.Errorf(api.CodeBadRequest, "limit %d: want 0 (all) or more", q.Limit)
	}
	var ts []ledger.Task
	n.cons.View(func(l *ledger.Ledger) { ts = l.Tasks(f) })
	if q.Limit > 0 && len(ts) > q.Limit {
		ts = ts[:q.Limit]
	}
	out := make([]api.TaskView, 0, len(ts))
	for i := range ts {
		out = append(out, taskView(&ts[i]))
	}
	return out, nil
}

func taskView(t *ledger.Task) api.TaskView {
	machine := t.Machine
	if machine == "" && len(t.Segments) > 0 {
		machine = t.Segments[len(t.Segments)-1].Machine
	}
	return api.TaskView{
		ID:          t.ID,
		Org:         t.Org,
		Name:        t.Spec.Name,
		State:       string(t.State),
		Machine:     machine,
		Attempts:    t.Attempts,
		ExitCode:    t.ExitCode,
		Reason:      t.Reason,
		SizeGFlop:   float64(t.SizeMFlop) / 1000,
		SubmittedMs: t.SubmittedMs,
		EndedMs:     t.EndedMs,
	}
}

// Task returns one task in detail, with the outputs this peer holds for it.
func (n *Node) Task(ctx context.Context, id string) (api.TaskDetail, error) {
	if err := n.requireReady(); err != nil {
		return api.TaskDetail{}, err
	}
	var (
		t  ledger.Task
		ok bool
	)
	n.cons.View(func(l *ledger.Ledger) { t, ok = l.Task(id) })
	if !ok {
		return api.TaskDetail{}, api.Errorf(api.CodeNotFound, "task %q is not in the ledger", id)
	}
	d := api.TaskDetail{
		TaskView:       taskView(&t),
		RemainingGFlop: float64(t.RemainingMFlop) / 1000,
		Argv:           t.Spec.Argv,
		Env:            t.Spec.Env,
		WallLimitMs:    t.Spec.WallLimitMs,
		Inputs:         t.Spec.Inputs,
		Outputs:        t.Spec.Outputs,
		Checkpointable: t.Spec.Checkpointable,
	}
	for _, s := range t.Segments {
		d.Segments = append(d.Segments, api.SegmentView{
			Machine: s.Machine, MachineOrg: s.MachineOrg, StartMs: s.StartMs, EndMs: s.EndMs,
			EnergyJ: float64(s.EnergyMilliJ) / 1000, Source: string(s.Source), Outcome: string(s.Outcome),
		})
	}
	if c := t.Checkpoint; c != nil {
		d.Checkpoint = &api.CheckpointView{Hash: c.Hash, SizeBytes: c.SizeBytes, AtMs: c.AtMs,
			ProgressGFlop: float64(c.ProgressMFlop) / 1000, Holders: c.Holders}
	}
	if t.Org == n.org {
		d.OutputFiles = n.listOutputs(t.ID)
	}
	return d, nil
}

// Submit stores the inputs by content in DATA/blobs (so the executing
// peers can fetch them), then queues the tasks in one SubmitTasks command.
func (n *Node) Submit(ctx context.Context, req api.SubmitRequest) (api.SubmitResponse, error) {
	if err := n.requireReady(); err != nil {
		return api.SubmitResponse{}, err
	}
	if len(req.Tasks) == 0 {
		return api.SubmitResponse{}, api.Errorf(api.CodeBadRequest, "no tasks")
	}
	if len(req.Tasks) > ledger.MaxTasksPerCommand {
		return api.SubmitResponse{}, api.Errorf(api.CodeTooLarge, "%d tasks in one submission, at most %d", len(req.Tasks), ledger.MaxTasksPerCommand)
	}
	specs := make([]ledger.TaskSpec, len(req.Tasks))
	for i, st := range req.Tasks {
		if st.SizeMFlop <= 0 {
			return api.SubmitResponse{}, api.Errorf(api.CodeBadRequest, "tasks[%d]: size %d MFlop: want a positive size", i, st.SizeMFlop)
		}
		name := st.Name
		if name == "" {
			name = req.Job
		}
		spec := ledger.Spec{
			Argv: st.Argv, Env: st.Env, WallLimitMs: st.WallLimitMs, Outputs: st.Outputs,
			Checkpointable: st.Checkpointable, Name: name,
		}
		var total int64
		for _, in := range st.Inputs {
			total += int64(len(in.Data))
			d := digestOf(in.Data)
			if in.Digest != "" && in.Digest != d {
				return api.SubmitResponse{}, api.Errorf(api.CodeBadRequest, "tasks[%d]: input %q: digest %s does not match its content (%s)", i, in.Name, in.Digest, d)
			}
			spec.Inputs = append(spec.Inputs, in.Name)
			spec.InputDigests = append(spec.InputDigests, d)
		}
		if total > n.cfg.Files.MaxInputBytes {
			return api.SubmitResponse{}, api.Errorf(api.CodeTooLarge, "tasks[%d]: inputs take %d bytes, at most %d", i, total, n.cfg.Files.MaxInputBytes)
		}
		specs[i] = ledger.TaskSpec{SizeMFlop: st.SizeMFlop, Spec: spec}
	}
	// Every submission carries a request ID (the client's, or one made up
	// here), so that resending it — the client after no answer, or this
	// peer after a proposal whose outcome it did not learn — never queues
	// the tasks twice: the ledger answers a resend with the original IDs.
	key := req.RequestID
	if key == "" {
		key = "peer:" + api.NewRequestID()
	}
	body := func(c *ledger.Command) { c.SubmitTasks = &ledger.SubmitTasks{RequestID: key, Tasks: specs} }
	// Check the whole command before storing anything.
	probe := ledger.Command{Org: n.org, Peer: n.self.String(), AtMs: n.now().UnixMilli()}
	body(&probe)
	encoded, err := ledger.EncodeCommand(probe)
	if err != nil {
		return api.SubmitResponse{}, apiError(err)
	}
	// A follower forwards the command to the leader in one stream frame.
	if max := n.host.Config().MaxMessageSize; len(encoded) > max && !n.cons.IsLeader() {
		return api.SubmitResponse{}, api.Errorf(api.CodeTooLarge, "the submission encodes to %d bytes; one forwarded to the leader may take at most %d: submit fewer tasks (or smaller inputs' names and commands) at once", len(encoded), max)
	}
	// Inputs are stored before the tasks exist: a peer fetching one finds
	// it as soon as the task is placed.
	for _, st := range req.Tasks {
		for _, in := range st.Inputs {
			if _, err := n.blobs.put(in.Data); err != nil {
				return api.SubmitResponse{}, apiError(err)
			}
		}
	}
	var res ledger.Result
	for attempt := 1; ; attempt++ {
		res, err = n.propose(ctx, body)
		if err == nil || !resendable(err) || attempt == submitAttempts {
			break
		}
		n.log.Info("submit: outcome unknown, proposing again with the same request ID", "request_id", key, "attempt", attempt, "err", err)
		if !sleep(ctx, time.Duration(attempt)*submitRetryPause) {
			break
		}
	}
	if err != nil {
		if resendable(err) || ctx.Err() != nil {
			return api.SubmitResponse{}, api.Errorf(api.CodeUnavailable, "the submission may or may not have been queued (%v): resend it with request ID %s to be sure not to queue it twice", err, key)
		}
		return api.SubmitResponse{}, apiError(err)
	}
	return api.SubmitResponse{TaskIDs: res.TaskIDs, RequestID: key, Replayed: res.Replayed}, nil
}

// A submission whose proposal ended with an unknown outcome (or found no
// leader) is proposed again, same request ID, up to submitAttempts times
// with a growing pause, while the caller waits.
const (
	submitAttempts   = 3
	submitRetryPause = 250 * time.Millisecond
)

// resendable says whether a proposal's error leaves it worth proposing a
// keyed submission again: the outcome is unknown, or no leader took it. A
// ledger rejection is an answer, not resendable.
func resendable(err error) bool {
	var pe *p2p.Error
	if !errors.As(err, &pe) && !errors.Is(err, p2p.ErrUnreachable) {
		return false
	}
	switch p2p.Code(err) {
	case consensus.CodeOutcomeUnknown, consensus.CodeNoLeader, consensus.CodeNotLeader, consensus.CodeTimeout,
		p2p.CodeUnavailable, p2p.CodeTruncated:
		return true
	}
	return false
}

// Cancel cancels one of this organisation's tasks.
func (n *Node) Cancel(ctx context.Context, id string) error {
	if err := n.requireReady(); err != nil {
		return err
	}
	if !validTaskID(id) {
		return api.Errorf(api.CodeBadRequest, "task ID %q", id)
	}
	_, err := n.propose(ctx, func(c *ledger.Command) { c.CancelTask = &ledger.CancelTask{Task: id} })
	return apiError(err)
}

// Logs returns a task's captured output of its latest run, from the peer
// that ran it (over ProtoLogs when that is another peer).
func (n *Node) Logs(ctx context.Context, id, stream string) ([]byte, error) {
	if stream != "stdout" && stream != "stderr" {
		return nil, api.Errorf(api.CodeBadRequest, "stream %q: want stdout or stderr", stream)
	}
	var (
		t     ledger.Task
		ok    bool
		owner string
	)
	n.cons.View(func(l *ledger.Ledger) {
		if t, ok = l.Task(id); ok && len(t.Segments) > 0 {
			if o, found := l.Org(t.Segments[len(t.Segments)-1].MachineOrg); found {
				owner = o.Peer
			}
		}
	})
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "task %q is not in the ledger", id)
	}
	if len(t.Segments) == 0 {
		return nil, api.Errorf(api.CodeNotFound, "task %s has not run yet", id)
	}
	if owner == "" {
		return nil, api.Errorf(api.CodeNotFound, "the organisation that ran task %s is no longer registered", id)
	}
	if owner == n.self.String() {
		b, err := n.readLocalLog(id, stream)
		return b, apiError(err)
	}
	if t.Org != n.org {
		return nil, api.Errorf(api.CodeForbidden, "task %s belongs to %q: only its organisation reads its logs", id, t.Org)
	}
	pid, err := peer.Decode(owner)
	if err != nil {
		return nil, api.Errorf(api.CodeInternal, "peer %q: %v", owner, err)
	}
	req := []byte(fmt.Sprintf(`{"task":%q,"stream":%q}`, id, stream))
	b, err := n.host.Request(ctx, pid, protocolID(ProtoLogs), req)
	if err != nil {
		return nil, apiError(err)
	}
	return b, nil
}

// SetLimit changes this organisation's power limit: a percentage of its
// power quota (its up machines' busy power) or watts.
func (n *Node) SetLimit(ctx context.Context, req api.LimitRequest) (api.OrgView, error) {
	if err := n.requireReady(); err != nil {
		return api.OrgView{}, err
	}
	if (req.Percent == nil) == (req.Watts == nil) {
		return api.OrgView{}, api.Errorf(api.CodeBadRequest, "give exactly one of percent and watts")
	}
	var mw int64
	switch {
	case req.Percent != nil:
		p := *req.Percent
		if math.IsNaN(p) || math.IsInf(p, 0) || p < 0 || p > 1e6 {
			return api.OrgView{}, api.Errorf(api.CodeBadRequest, "percent %v: want a finite number between 0 and 1000000", p)
		}
		var quota int64
		n.cons.View(func(l *ledger.Ledger) {
			if o, ok := l.Org(n.org); ok {
				quota = o.PowerQuotaMilliW
			}
		})
		mw = Limit{Percent: p, isPercent: true}.MilliWatts(quota)
	default:
		w := *req.Watts
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 || w*1000 > ledger.MaxLimitMilliW {
			return api.OrgView{}, api.Errorf(api.CodeBadRequest, "watts %v: want a finite number between 0 and %d", w, int64(ledger.MaxLimitMilliW/1000))
		}
		mw = int64(math.Round(w * 1000))
	}
	if _, err := n.propose(ctx, func(c *ledger.Command) { c.SetLimit = &ledger.SetLimit{LimitMilliW: mw} }); err != nil {
		return api.OrgView{}, apiError(err)
	}
	var o ledger.OrgInfo
	n.cons.View(func(l *ledger.Ledger) { o, _ = l.Org(n.org) })
	return orgView(o), nil
}

// Ledger is every organisation's energy account and the state's hash.
func (n *Node) Ledger(ctx context.Context) (api.LedgerView, error) {
	if err := n.requireReady(); err != nil {
		return api.LedgerView{}, err
	}
	var v api.LedgerView
	n.cons.View(func(l *ledger.Ledger) {
		v.AppliedIndex, v.StateHash = l.AppliedIndex(), l.Hash()
		for _, o := range l.Orgs() {
			v.Orgs = append(v.Orgs, api.LedgerAccount{
				Org:          o.Name,
				UserJ:        float64(o.Energy.UserMilliJ) / 1000,
				OwnerSelfJ:   float64(o.Energy.OwnerSelfMilliJ) / 1000,
				OwnerOthersJ: float64(o.Energy.OwnerOthersMilliJ) / 1000,
				LimitW:       float64(o.LimitMilliW) / 1000,
				PIW:          float64(o.PIMilliW) / 1000,
			})
		}
	})
	if v.Orgs == nil {
		v.Orgs = []api.LedgerAccount{}
	}
	return v, nil
}

// Leave stops the tasks running here, declares this peer's machines lost
// (their tasks are queued again elsewhere) and removes the peer from the
// Raft group. The organisation stays in the ledger with its accounts. The
// node then stops (Done is closed); the daemon exits.
func (n *Node) Leave(ctx context.Context) error {
	if err := n.requireReady(); err != nil {
		return err
	}
	members, err := n.cons.Members()
	if err != nil {
		return apiError(err)
	}
	if len(members) <= 1 {
		return api.Errorf(api.CodeConflict, "this peer is the federation's only member: there is nothing to leave")
	}
	n.closing.Store(true)
	if n.exec != nil {
		if err := n.exec.Close(ctx); err != nil {
			n.log.Warn("leave: stop tasks", "err", err)
		}
	}
	n.releaseMachines(ctx)
	if err := n.cons.Leave(ctx); err != nil {
		n.closing.Store(false)
		return apiError(err)
	}
	n.left.Store(true)
	n.log.Info("left the federation")
	n.stop(nil)
	return nil
}

func (n *Node) requireReady() error {
	select {
	case <-n.ready:
	default:
		return api.Errorf(api.CodeUnavailable, "the peer is not ready yet: it is still joining the federation, registering %q or catching up with the log", n.org)
	}
	if n.closing.Load() {
		return api.Errorf(api.CodeUnavailable, "the peer is shutting down")
	}
	return nil
}

// apiError maps errors of the ledger, the consensus layer and the file
// protocols to the API's codes; nil stays nil.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	var le *ledger.Error
	if errors.As(err, &le) {
		switch le.Code {
		case ledger.CodeMalformed, ledger.CodeBadVersion:
			return api.Errorf(api.CodeBadRequest, "%s", le.Msg)
		case ledger.CodeNotOwner:
			return api.Errorf(api.CodeForbidden, "%s", le.Msg)
		case ledger.CodeUnknownTask, ledger.CodeUnknownOrg, ledger.CodeUnknownMachine:
			return api.Errorf(api.CodeNotFound, "%s", le.Msg)
		case ledger.CodeLimitExceeded, ledger.CodeBadState, ledger.CodeExists, ledger.CodeMachineBusy,
			ledger.CodeMachineDown, ledger.CodeStale, ledger.CodeOverflow:
			return api.Errorf(api.CodeConflict, "%s", le.Msg)
		}
		return api.Errorf(api.CodeInternal, "%s", le.Error())
	}
	var pe *p2p.Error
	if errors.As(err, &pe) || errors.Is(err, p2p.ErrUnreachable) {
		switch p2p.Code(err) {
		case consensus.CodeForbidden, consensus.CodeNotMember:
			return api.Errorf(api.CodeForbidden, "%v", err)
		case consensus.CodeBadCommand, p2p.CodeBadRequest:
			return api.Errorf(api.CodeBadRequest, "%v", err)
		case CodeNotFound:
			return api.Errorf(api.CodeNotFound, "%v", err)
		case consensus.CodeLastMember:
			return api.Errorf(api.CodeConflict, "%v", err)
		case p2p.CodeTooLarge:
			return api.Errorf(api.CodeTooLarge, "%v", err)
		case consensus.CodeNoLeader, consensus.CodeNotLeader, consensus.CodeOutcomeUnknown, consensus.CodeShutdown,
			consensus.CodeTimeout, consensus.CodeMembership, p2p.CodeUnavailable, p2p.CodeCanceled, p2p.CodeTruncated:
			return api.Errorf(api.CodeUnavailable, "%v", err)
		}
		return api.Errorf(api.CodeInternal, "%v", err)
	}
	if errors.Is(err, p2p.ErrTooLarge) {
		return api.Errorf(api.CodeTooLarge, "%v (a command forwarded to the leader is bounded by the stream frame size: submit fewer tasks at once)", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return api.Errorf(api.CodeUnavailable, "%v", err)
	}
	return api.Errorf(api.CodeInternal, "%v", err)
}

// Metrics reports the leader loop's counters (api.MetricsSource): the
// passes and decisions this peer made while it led.
func (n *Node) Metrics(ctx context.Context) (api.NodeMetrics, error) {
	s := n.SchedulerStats()
	return api.NodeMetrics{
		SchedulingPasses:  s.Passes,
		PassErrors:        s.Errors,
		DecisionsProposed: s.Proposed,
		DecisionsAccepted: s.Accepted,
		DecisionsRejected: s.Rejected,
	}, nil
}

var _ api.MetricsSource = (*Node)(nil)
