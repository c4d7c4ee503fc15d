package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/leader"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/coopgrid/coopgrid/transfer"
	"github.com/libp2p/go-libp2p/core/protocol"
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
	st.Raft.CommandVersion = ledger.MaxCommandVersion()
	if err := n.cons.Halted(); err != nil {
		st.Raft.Halted = err.Error()
	}
	members, err := n.cons.Members()
	if err != nil {
		return api.Status{}, apiError(err)
	}
	n.cons.View(func(l *ledger.Ledger) {
		for _, m := range members {
			pv := api.PeerView{ID: m.ID.String(), Voter: m.Voter, Leader: m.ID.String() == st.Leader, Addrs: []string{}}
			pv.Org, _ = l.OrgOfPeer(m.ID.String())
			pv.Reachable, pv.LastContactMs = n.peerContact(m.ID)
			for _, a := range m.Addrs {
				pv.Addrs = append(pv.Addrs, a.String())
			}
			st.Peers = append(st.Peers, pv)
		}
		st.Orgs = apiconv.Orgs(l.Orgs())
		st.JobPolicy = apiconv.JobPolicy(l.JobPolicy(), l.JobPolicyVotes())
		rv := retentionRuleView(l)
		st.Retention = &rv
	})
	return st, nil
}

// Orgs lists the organisations in registration order.
func (n *Node) Orgs(ctx context.Context) ([]api.OrgView, error) {
	if err := n.requireReady(); err != nil {
		return nil, err
	}
	var out []api.OrgView
	n.cons.View(func(l *ledger.Ledger) { out = apiconv.Orgs(l.Orgs()) })
	return out, nil
}

// Machines lists every machine; the last heartbeat is the later of the
// ledger's record and the gossip this peer heard.
func (n *Node) Machines(ctx context.Context) ([]api.MachineView, error) {
	if err := n.requireReady(); err != nil {
		return nil, err
	}
	var out []api.MachineView
	now := n.now().UnixMilli()
	n.cons.View(func(l *ledger.Ledger) { out = apiconv.MachinesAt(l, now) })
	for i := range out {
		out[i].LastHeartbeatMs = max(out[i].LastHeartbeatMs, n.gossip.LastHeartbeatMs(out[i].ID))
	}
	return out, nil
}

// Tasks lists tasks by submit order; q (checked by api.ValidateTaskQuery)
// filters them and its Limit keeps the first ones.
func (n *Node) Tasks(ctx context.Context, q api.TaskQuery) ([]api.TaskView, error) {
	if err := n.requireReady(); err != nil {
		return nil, err
	}
	var (
		ts      []ledger.Task
		reasons map[string]ledger.PendingReason
		finish  map[string]int64
	)
	n.cons.View(func(l *ledger.Ledger) {
		ts = l.Tasks(apiconv.TaskFilter(q))
		if slices.ContainsFunc(ts, func(t ledger.Task) bool { return t.State == ledger.TaskQueued }) {
			reasons = l.Pending()
		}
		if q.Limit > 0 && len(ts) > q.Limit {
			ts = ts[:q.Limit]
		}
		finish = l.PredictedFinishes(ts)
	})
	views := apiconv.Tasks(ts)
	apiconv.WithPending(views, reasons)
	apiconv.WithPredictions(views, finish)
	return views, nil
}

// Task returns one task in detail, with the outputs this peer holds for it.
func (n *Node) Task(ctx context.Context, id string) (api.TaskDetail, error) {
	if err := n.requireReady(); err != nil {
		return api.TaskDetail{}, err
	}
	var (
		t       ledger.Task
		ok      bool
		reasons map[string]ledger.PendingReason
		finish  map[string]int64
	)
	n.cons.View(func(l *ledger.Ledger) {
		if t, ok = l.Task(id); ok && t.State == ledger.TaskQueued {
			reasons = l.Pending()
		}
		if ok {
			finish = l.PredictedFinishes([]ledger.Task{t})
		}
	})
	if !ok {
		return api.TaskDetail{}, api.Errorf(api.CodeNotFound, "task %q is not in the ledger", id)
	}
	d := apiconv.TaskDetail(&t)
	one := []api.TaskView{d.TaskView}
	apiconv.WithPending(one, reasons)
	apiconv.WithPredictions(one, finish)
	d.TaskView = one[0]
	if t.Org == n.org {
		d.OutputFiles = n.files.ListOutputs(t.ID)
	}
	return d, nil
}

// Submit queues the tasks in one SubmitTasks command. The request has
// passed api.ValidateSubmit and ResolveBlobs in the server (every input's
// Digest is checked); what is left is checked here: the ledger's rules, in
// the one pass that encodes and signs the command (encode), and this
// peer's bounds. Those bytes are what is proposed, and proposed again on a
// retry (same signature: a resend is the same command). The inputs are stored by content in DATA/blobs (so that the
// executing peers can fetch them) once the command is known to be valid,
// before it is proposed.
func (n *Node) Submit(ctx context.Context, req api.SubmitRequest) (api.SubmitResponse, error) {
	if err := n.requireReady(); err != nil {
		return api.SubmitResponse{}, err
	}
	if len(req.Tasks) > ledger.MaxTasksPerCommand {
		return api.SubmitResponse{}, api.Errorf(api.CodeTooLarge, "%d tasks in one submission, at most %d", len(req.Tasks), ledger.MaxTasksPerCommand)
	}
	// Every submission carries a request ID (the client's, or one made up
	// here), so that resending it — the client after no answer, or this
	// peer after a proposal whose outcome it did not learn — never queues
	// the tasks twice: the ledger answers a resend with the original IDs.
	key := req.RequestID
	if key == "" {
		key = "peer:" + api.NewRequestID()
	}
	nowMs := n.now().UnixMilli()
	apiconv.ResolveDeadlines(&req, nowMs)
	moldable, err := n.chooseRequests(&req, nowMs) // sa.go
	if err != nil {
		return api.SubmitResponse{}, err
	}
	cmd := ledger.Command{Org: n.org, Peer: n.self.String(), AtMs: nowMs, SubmitTasks: apiconv.SubmitTasks(req, key)}
	apiconv.WithMoldable(cmd.SubmitTasks, req, moldable)
	nice := n.fallBackToNice(cmd, req) // deadline.go
	encoded, err := n.encode(cmd)
	if err != nil {
		return api.SubmitResponse{}, apiconv.Error(err)
	}
	if err := n.checkSubmitSize(req, len(encoded)); err != nil {
		return api.SubmitResponse{}, err
	}
	// Inputs are stored before the tasks exist: a peer fetching one finds
	// it as soon as the task is placed.
	for _, st := range req.Tasks {
		for _, in := range st.Inputs {
			if _, err := n.files.PutBlob(in.Data); err != nil {
				return api.SubmitResponse{}, apiError(err)
			}
		}
	}
	res, err := n.proposeSubmit(ctx, encoded, key)
	if p2p.Code(err) == leader.CodeDeadlineUnmeetable {
		res, err = n.retryAsNice(ctx, cmd, req, key, err, nice)
	}
	if err != nil {
		if p2p.Code(err) == consensus.CodeNoQuorum {
			return api.SubmitResponse{}, api.Errorf(api.CodeNoQuorum, "%s; nothing is queued until a majority of the voters is back: resend with request ID %s then (safe even if an earlier attempt commits after all)", p2pMessage(err), key)
		}
		if resendable(err) || ctx.Err() != nil {
			return api.SubmitResponse{}, api.Errorf(api.CodeUnavailable, "the submission may or may not have been queued (%v): resend it with request ID %s to be sure not to queue it twice", err, key)
		}
		return api.SubmitResponse{}, apiError(err)
	}
	resp := nice.response(api.SubmitResponse{TaskIDs: res.TaskIDs, RequestID: key, Replayed: res.Replayed})
	if !res.Replayed {
		resp.Moldable = moldable
	}
	return resp, nil
}

// checkSubmitSize holds a submission to this peer's bounds: each task's
// input files together, and a command a follower forwards to the leader
// in one stream frame.
func (n *Node) checkSubmitSize(req api.SubmitRequest, encodedLen int) error {
	for i, st := range req.Tasks {
		var total int64
		for _, in := range st.Inputs {
			total += int64(len(in.Data))
		}
		if total > n.cfg.Files.MaxInputBytes {
			return api.Errorf(api.CodeTooLarge, "tasks[%d]: inputs take %d bytes, at most %d", i, total, n.cfg.Files.MaxInputBytes)
		}
	}
	if max := n.host.Config().MaxMessageSize; encodedLen > max && !n.cons.IsLeader() {
		return api.Errorf(api.CodeTooLarge, "the submission encodes to %d bytes; one forwarded to the leader may take at most %d: submit fewer tasks (or smaller inputs' names and commands) at once", encodedLen, max)
	}
	return nil
}

// A submission whose proposal ended with an unknown outcome (or found no
// leader) is proposed again, same bytes and so same request ID, up to
// submitAttempts times in all, after submitRetryPause, 2×submitRetryPause,
// …, while the caller waits.
const (
	submitAttempts   = 3
	submitRetryPause = 250 * time.Millisecond
)

// proposeSubmit proposes an encoded submission, again while resendable,
// and returns the last attempt's result and error.
func (n *Node) proposeSubmit(ctx context.Context, encoded []byte, key string) (ledger.Result, error) {
	var (
		res     ledger.Result
		last    error
		attempt int
	)
	_, _ = backoff.Retry(ctx, func() (struct{}, error) {
		attempt++
		res, last = n.proposeEncoded(ctx, encoded)
		// No quorum is resendable later, not within this request: the
		// answer would be the same.
		if last != nil && (!resendable(last) || p2p.Code(last) == consensus.CodeNoQuorum) {
			return struct{}{}, backoff.Permanent(last)
		}
		return struct{}{}, last
	}, backoff.WithBackOff(&linearBackOff{step: submitRetryPause}), backoff.WithMaxTries(submitAttempts), backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, _ time.Duration) {
			n.log.Info("submit: outcome unknown, proposing again with the same request ID", "request_id", key, "attempt", attempt, "err", err)
		}))
	return res, last
}

// linearBackOff waits step, then 2×step, 3×step, …
type linearBackOff struct{ step, next time.Duration }

func (b *linearBackOff) Reset()                     { b.next = 0 }
func (b *linearBackOff) NextBackOff() time.Duration { b.next += b.step; return b.next }

// resendable says whether a proposal's error leaves it worth proposing a
// keyed submission again: the outcome is unknown, or no leader took it. A
// ledger rejection is an answer, not resendable.
func resendable(err error) bool {
	// A submission carries its request ID, so resending it is safe even
	// when a first answer was cut off (truncated): the ledger answers a
	// resend with the original task IDs.
	return consensus.Retryable(err) || p2p.Code(err) == p2p.CodeTruncated
}

// Cancel cancels one of this organisation's tasks.
func (n *Node) Cancel(ctx context.Context, id string) error {
	if err := n.requireReady(); err != nil {
		return err
	}
	if !transfer.ValidTaskID(id) {
		return api.Errorf(api.CodeBadRequest, "task ID %q", id)
	}
	_, err := n.propose(ctx, func(c *ledger.Command) { c.CancelTask = &ledger.CancelTask{Task: id} })
	return apiError(err)
}

// Retry queues one of this organisation's failed or cancelled tasks again
// (ledger retry_task: the ledger refuses another organisation's task).
func (n *Node) Retry(ctx context.Context, id string) error {
	if err := n.requireReady(); err != nil {
		return err
	}
	if !transfer.ValidTaskID(id) {
		return api.Errorf(api.CodeBadRequest, "task ID %q", id)
	}
	_, err := n.propose(ctx, func(c *ledger.Command) { c.RetryTask = &ledger.RetryTask{Task: id} })
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
		b, err := n.files.ReadLocalLog(id, stream)
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
	b, err := n.host.Request(ctx, pid, protocol.ID(transfer.ProtoLogs), req)
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
	if err := api.ValidateLimit(req); err != nil {
		return api.OrgView{}, err
	}
	var quota int64
	n.cons.View(func(l *ledger.Ledger) {
		if o, ok := l.Org(n.org); ok {
			quota = o.PowerQuotaMilliW
		}
	})
	mw := apiconv.LimitMilliW(req, quota)
	if _, err := n.propose(ctx, func(c *ledger.Command) { c.SetLimit = &ledger.SetLimit{LimitMilliW: mw} }); err != nil {
		return api.OrgView{}, apiError(err)
	}
	var o ledger.OrgInfo
	n.cons.View(func(l *ledger.Ledger) { o, _ = l.Org(n.org) })
	return apiconv.Org(o), nil
}

// Ledger is every organisation's energy account and the state's hash.
func (n *Node) Ledger(ctx context.Context) (api.LedgerView, error) {
	if err := n.requireReady(); err != nil {
		return api.LedgerView{}, err
	}
	var v api.LedgerView
	n.cons.View(func(l *ledger.Ledger) { v = apiconv.Ledger(l.AppliedIndex(), l.Hash(), l.Orgs()) })
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
	n.runner.SetClosing(true)
	if n.exec != nil {
		if err := n.exec.Close(ctx); err != nil {
			n.log.Warn("leave: stop tasks", "err", err)
		}
	}
	n.releaseMachines(ctx)
	if err := n.cons.Leave(ctx); err != nil {
		n.closing.Store(false)
		n.runner.SetClosing(false)
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
	if err := n.cons.Halted(); err != nil {
		return api.Errorf(api.CodeUnavailable, "%v", err)
	}
	return nil
}

// apiError maps errors of the ledger (through apiconv.Error, the mapping
// the test double shares), the consensus layer and the file protocols to
// the API's codes; nil stays nil.
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
		return apiconv.Error(err)
	}
	var pe *p2p.Error
	if errors.As(err, &pe) || errors.Is(err, p2p.ErrUnreachable) {
		switch p2p.Code(err) {
		case consensus.CodeForbidden, consensus.CodeNotMember:
			return api.Errorf(api.CodeForbidden, "%v", err)
		case consensus.CodeBadCommand, p2p.CodeBadRequest:
			return api.Errorf(api.CodeBadRequest, "%v", err)
		case transfer.CodeNotFound:
			return api.Errorf(api.CodeNotFound, "%v", err)
		case consensus.CodeLastMember, leader.CodeVersionUnsupported:
			return api.Errorf(api.CodeConflict, "%v", err)
		case leader.CodeDeadlineUnmeetable:
			return api.Errorf(api.CodeDeadlineUnmeetable, "%s", p2pMessage(err))
		case consensus.CodeHalted:
			return api.Errorf(api.CodeUnavailable, "%v", err)
		case p2p.CodeTooLarge:
			return api.Errorf(api.CodeTooLarge, "%v", err)
		case consensus.CodeNoQuorum:
			return api.Errorf(api.CodeNoQuorum, "%s", p2pMessage(err))
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

// p2pMessage is the message of a coded error without its code (which the
// API error carries as its own).
func p2pMessage(err error) string {
	var pe *p2p.Error
	if errors.As(err, &pe) && pe.Message != "" {
		return pe.Message
	}
	return err.Error()
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
