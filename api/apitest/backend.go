// Package apitest provides an api.Backend over a real ledger.Ledger, for
// tests of the API server, its client and the CLI, and for demos. It acts
// as one organisation's peer in a federation of one Raft member: every
// write is a real ledger command applied at the next log index, so the
// answers (IDs, states, errors, PI, DP, energy) are the ledger's own,
// converted as the daemon converts them (package node/apiconv).
package apitest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// Backend is a ledger-backed api.Backend. Safe for concurrent use.
type Backend struct {
	mu   sync.Mutex
	l    *ledger.Ledger
	idx  uint64
	org  string
	peer string
	// now is the clock commands are stamped with (unix ms).
	now  func() int64
	logs map[string]map[string][]byte
	// inputs keeps the files the ledger knows only by digest.
	inputs map[string][]api.InputFile
	left   bool
	nm     api.NodeMetrics
	// events holds the task transitions of the applied commands, as a
	// peer keeps them for GET /v1/events.
	events *api.EventLog
}

var (
	_ api.Backend         = (*Backend)(nil)
	_ api.MetricsSource   = (*Backend)(nil)
	_ api.TaskEventSource = (*Backend)(nil)
)

// New returns a backend acting as peer for organisation org, over an
// empty ledger. Register the organisation (Register or Apply) before
// writing. now stamps commands; nil means the wall clock.
func New(org, peer string, now func() int64) *Backend {
	if now == nil {
		now = func() int64 { return time.Now().UnixMilli() }
	}
	return &Backend{
		l: ledger.New(), org: org, peer: peer, now: now,
		logs: map[string]map[string][]byte{}, inputs: map[string][]api.InputFile{},
		events: api.NewEventLog(0),
	}
}

// Apply applies c at the next log index and returns the ledger's result;
// a zero V, empty Org/Peer and zero AtMs are filled in with this backend's
// version, organisation, peer and clock. A rejected command is returned as
// the error (a *ledger.Error).
func (b *Backend) Apply(c ledger.Command) (ledger.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.apply(c)
}

func (b *Backend) apply(c ledger.Command) (ledger.Result, error) {
	data, err := ledger.EncodeCommand(b.stamp(c))
	if err != nil {
		return ledger.Result{}, err
	}
	return b.applyEncoded(data)
}

// stamp fills in c's acting organisation, peer and clock where empty.
func (b *Backend) stamp(c ledger.Command) ledger.Command {
	if c.Org == "" {
		c.Org, c.Peer = b.org, b.peer
	}
	if c.AtMs == 0 {
		c.AtMs = b.now()
	}
	return c
}

// applyEncoded applies an encoded command at the next log index.
func (b *Backend) applyEncoded(data []byte) (ledger.Result, error) {
	b.idx++
	r := b.l.Apply(b.idx, data)
	b.events.Append(b.idx, apiconv.TaskEvents(&r))
	if err := b.l.CheckInvariants(); err != nil {
		return r, fmt.Errorf("ledger invariants broken after index %d: %w", b.idx, err)
	}
	if r.Err != nil {
		return r, r.Err
	}
	b.nm.DecisionsProposed += uint64(len(r.Decisions))
	for _, d := range r.Decisions {
		if d.Err == nil {
			b.nm.DecisionsAccepted++
		} else {
			b.nm.DecisionsRejected++
		}
	}
	if r.Kind == ledger.KindDecisions || r.Kind == ledger.KindSchedule {
		b.nm.SchedulingPasses++
	}
	return r, nil
}

// Register registers organisation org, acting as peer, with its limit and
// machines (a real register_org command).
func (b *Backend) Register(org, peer string, limitMilliW int64, machines ...ledger.MachineSpec) error {
	_, err := b.Apply(ledger.Command{Org: org, Peer: peer, RegisterOrg: &ledger.RegisterOrg{LimitMilliW: limitMilliW, Machines: machines}})
	return err
}

// SetLogs sets what Logs returns for a task's stream.
func (b *Backend) SetLogs(task, stream string, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.logs[task] == nil {
		b.logs[task] = map[string][]byte{}
	}
	b.logs[task][stream] = append([]byte(nil), data...)
}

// Inputs returns the input files submitted with a task.
func (b *Backend) Inputs(task string) []api.InputFile {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inputs[task]
}

// Left says whether Leave was called.
func (b *Backend) Left() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left
}

// HashAndIndex returns the ledger's state hash and applied index.
func (b *Backend) HashAndIndex() (string, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.l.Hash(), b.l.AppliedIndex()
}

func (b *Backend) writable() error {
	if b.left {
		return api.Errorf(api.CodeUnavailable, "this peer left the federation")
	}
	return nil
}

// Status implements api.Backend: this peer leads a federation whose
// members are the registered organisations' peers.
func (b *Backend) Status(context.Context) (api.Status, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	state := "Leader"
	if b.left {
		state = "Shutdown"
	}
	st := api.Status{
		Self: b.peer, Org: b.org, Leader: b.peer,
		Raft: api.RaftStatus{State: state, AppliedIndex: b.l.AppliedIndex(), StateHash: b.l.Hash()},
		Orgs: apiconv.Orgs(b.l.Orgs()),
	}
	for _, o := range st.Orgs {
		p := api.PeerView{ID: o.Peer, Org: o.Name, Voter: true, Leader: o.Peer == b.peer, Addrs: []string{}}
		if o.Peer == b.peer {
			p.Addrs = []string{"/ip4/127.0.0.1/tcp/4001/p2p/" + b.peer}
		}
		st.Peers = append(st.Peers, p)
	}
	return st, nil
}

// Orgs implements api.Backend.
func (b *Backend) Orgs(context.Context) ([]api.OrgView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return apiconv.Orgs(b.l.Orgs()), nil
}

// Machines implements api.Backend.
func (b *Backend) Machines(context.Context) ([]api.MachineView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return apiconv.MachinesAt(b.l, b.now()), nil
}

// Tasks implements api.Backend.
func (b *Backend) Tasks(_ context.Context, q api.TaskQuery) ([]api.TaskView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ts := b.l.Tasks(apiconv.TaskFilter(q))
	if q.Limit > 0 && len(ts) > q.Limit {
		ts = ts[:q.Limit]
	}
	views := apiconv.Tasks(ts)
	apiconv.WithPending(views, b.l.Pending())
	apiconv.WithPredictions(views, b.l.PredictedFinishes(ts))
	return views, nil
}

// Task implements api.Backend.
func (b *Backend) Task(_ context.Context, id string) (api.TaskDetail, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.l.Task(id)
	if !ok {
		return api.TaskDetail{}, api.Errorf(api.CodeNotFound, "no task %q", id)
	}
	d := apiconv.TaskDetail(&t)
	one := []api.TaskView{d.TaskView}
	apiconv.WithPending(one, b.l.Pending())
	apiconv.WithPredictions(one, b.l.PredictedFinishes([]ledger.Task{t}))
	d.TaskView = one[0]
	return d, nil
}

// Submit implements api.Backend with submit_tasks commands of at most
// ledger.MaxTasksPerCommand tasks each, converted and encoded as the
// daemon does (apiconv). A request ID guards the first command; batch
// i ≥ 1 of a larger request uses "<id>.<i>" (an ID too long for the suffix
// leaves those batches unguarded). A request without one is not guarded,
// so that seeded states stay the same. Every batch is encoded, and so
// checked, before the first is applied: a refused request queues nothing.
func (b *Backend) Submit(_ context.Context, req api.SubmitRequest) (api.SubmitResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.writable(); err != nil {
		return api.SubmitResponse{}, err
	}
	// The clock ticks at every reading: read it only for a relative
	// deadline, so that seeded states stay the same.
	if slices.ContainsFunc(req.Tasks, func(t api.SubmitTask) bool { return t.DeadlineInMs > 0 }) {
		apiconv.ResolveDeadlines(&req, b.now())
	}
	var batches [][]byte
	for batch, start := 0, 0; start < len(req.Tasks); batch, start = batch+1, start+ledger.MaxTasksPerCommand {
		end := min(start+ledger.MaxTasksPerCommand, len(req.Tasks))
		key := req.RequestID
		if batch > 0 && key != "" {
			if key = fmt.Sprintf("%s.%d", key, batch); !ledger.ValidRequestID(key) {
				key = ""
			}
		}
		part := req
		part.Tasks = req.Tasks[start:end]
		data, err := ledger.EncodeCommand(b.stamp(ledger.Command{SubmitTasks: apiconv.SubmitTasks(part, key)}))
		if err != nil {
			return api.SubmitResponse{}, apiconv.Error(inRequest(err, start))
		}
		batches = append(batches, data)
	}
	resp := api.SubmitResponse{RequestID: req.RequestID, Replayed: req.RequestID != ""}
	for batch, data := range batches {
		start := batch * ledger.MaxTasksPerCommand
		r, err := b.applyEncoded(data)
		if err != nil {
			return api.SubmitResponse{}, apiconv.Error(err)
		}
		for i, id := range r.TaskIDs {
			b.inputs[id] = req.Tasks[start+i].Inputs
		}
		resp.TaskIDs = append(resp.TaskIDs, r.TaskIDs...)
		resp.Replayed = resp.Replayed && r.Replayed
	}
	return resp, nil
}

// inRequest renumbers a refusal of "tasks[i]" of a batch that starts at
// the request's task start, so that it names the request's task.
func inRequest(err error, start int) error {
	var le *ledger.Error
	if start == 0 || !errors.As(err, &le) {
		return err
	}
	head, rest, ok := strings.Cut(le.Msg, "]: ")
	i, aerr := strconv.Atoi(strings.TrimPrefix(head, "tasks["))
	if !ok || aerr != nil || !strings.HasPrefix(head, "tasks[") {
		return err
	}
	return &ledger.Error{Code: le.Code, Msg: fmt.Sprintf("tasks[%d]: %s", start+i, rest)}
}

// Cancel implements api.Backend.
func (b *Backend) Cancel(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.writable(); err != nil {
		return err
	}
	_, err := b.apply(ledger.Command{CancelTask: &ledger.CancelTask{Task: id}})
	return apiconv.Error(err)
}

// Retry implements api.Backend.
func (b *Backend) Retry(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.writable(); err != nil {
		return err
	}
	_, err := b.apply(ledger.Command{RetryTask: &ledger.RetryTask{Task: id}})
	return apiconv.Error(err)
}

// Logs implements api.Backend.
func (b *Backend) Logs(_ context.Context, id, stream string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.l.Task(id); !ok {
		return nil, api.Errorf(api.CodeNotFound, "no task %q", id)
	}
	return append([]byte(nil), b.logs[id][stream]...), nil
}

// SetLimit implements api.Backend: a percentage is of the organisation's
// power quota (its up machines' busy power).
func (b *Backend) SetLimit(_ context.Context, req api.LimitRequest) (api.OrgView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.writable(); err != nil {
		return api.OrgView{}, err
	}
	o, ok := b.l.Org(b.org)
	if !ok {
		return api.OrgView{}, api.Errorf(api.CodeUnavailable, "organisation %q is not registered yet", b.org)
	}
	mW := apiconv.LimitMilliW(req, o.PowerQuotaMilliW)
	if _, err := b.apply(ledger.Command{SetLimit: &ledger.SetLimit{LimitMilliW: mW}}); err != nil {
		return api.OrgView{}, apiconv.Error(err)
	}
	o, _ = b.l.Org(b.org)
	return apiconv.Org(o), nil
}

// Ledger implements api.Backend.
func (b *Backend) Ledger(context.Context) (api.LedgerView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return apiconv.Ledger(b.l.AppliedIndex(), b.l.Hash(), b.l.Orgs()), nil
}

// Leave implements api.Backend: later writes fail with unavailable.
func (b *Backend) Leave(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left {
		return api.Errorf(api.CodeConflict, "this peer already left the federation")
	}
	b.left = true
	return nil
}

// Metrics implements api.MetricsSource from the decisions applied.
func (b *Backend) Metrics(context.Context) (api.NodeMetrics, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nm, nil
}

// Identities of the seeded federation.
const (
	PeerAlpha = "12D3KooWalpha"
	PeerBeta  = "12D3KooWbeta"
)

// SeedStartMs is the clock of the first seeded command; each later one is
// a second later.
const SeedStartMs = 1_700_000_000_000

// NewSeeded returns a backend acting for organisation "alpha" in a
// federation in a known state, built with eight real ledger commands
// (applied index 8). The tests of the server, client and CLI assert these
// figures:
//
//	alpha (PeerAlpha): limit 800 W; alpha/a1 10 GFLOPS 200 W, alpha/a2 20 GFLOPS 300 W (idle 50 W)
//	beta  (PeerBeta):  limit 1000 W; beta/b1 40 GFLOPS 400 W
//	alpha-1 "render-0" 100 GFlop: ran on beta/b1, done, exit 0, 12.345 J (rapl), 1 attempt
//	alpha-2 "render-1" 100 GFlop: assigned to alpha/a2
//	alpha-3 "render-2" 100 GFlop: queued
//	beta-1 50 GFlop: running on alpha/a1
//	one scheduling pass: 3 decisions accepted, 1 rejected (stale)
//	alpha: queued 1, running 1, done 1, PI 300 W, allocated 20 GFLOPS, quota 30 GFLOPS, DP −1/3, user 12.345 J
//	beta:  queued 0, running 1, PI 200 W, allocated 10 GFLOPS, quota 40 GFLOPS, DP −0.75, owner 12.345 J
//	logs of alpha-1: stdout "hello from alpha-1\n", stderr "warning: nothing\n"
//
// After seeding, the backend's clock is now (nil: the wall clock).
func NewSeeded(now func() int64) (*Backend, error) {
	at := int64(SeedStartMs)
	tick := func() int64 { at += 1000; return at - 1000 }
	b := New("alpha", PeerAlpha, tick)
	steps := []func() error{
		func() error {
			return b.Register("alpha", PeerAlpha, 800_000,
				ledger.MachineSpec{Name: "a1", MFLOPS: 10_000, BusyMilliW: 200_000},
				ledger.MachineSpec{Name: "a2", MFLOPS: 20_000, BusyMilliW: 300_000, IdleMilliW: 50_000})
		},
		func() error {
			return b.Register("beta", PeerBeta, 1_000_000, ledger.MachineSpec{Name: "b1", MFLOPS: 40_000, BusyMilliW: 400_000})
		},
		func() error {
			req := api.SubmitRequest{Job: "render"}
			for i := range 3 {
				req.Tasks = append(req.Tasks, api.SubmitTask{
					Name: fmt.Sprintf("render-%d", i), Argv: []string{"/bin/echo", "frame", fmt.Sprint(i)},
					Env: map[string]string{"FRAME": fmt.Sprint(i)}, SizeMFlop: 100_000, WallLimitMs: 60_000,
					Inputs:  []api.InputFile{{Name: "scene.txt", Data: []byte("scene\n")}},
					Outputs: []string{fmt.Sprintf("frame-%d.png", i)},
				})
			}
			_, err := b.Submit(context.Background(), req)
			return err
		},
		func() error {
			_, err := b.Apply(ledger.Command{Org: "beta", Peer: PeerBeta, SubmitTasks: &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 50_000, Spec: ledger.Spec{Argv: []string{"/bin/true"}, WallLimitMs: 60_000}}}}})
			return err
		},
		func() error {
			_, err := b.Apply(ledger.Command{Decisions: &ledger.Decisions{ViewIndex: 4, Decisions: []ledger.Decision{
				{Kind: ledger.DecideAllocate, Task: "alpha-1", Machine: "beta/b1"},
				{Kind: ledger.DecideAllocate, Task: "beta-1", Machine: "alpha/a1"},
				{Kind: ledger.DecideAllocate, Task: "alpha-2", Machine: "alpha/a2"},
				{Kind: ledger.DecideAllocate, Task: "alpha-1", Machine: "alpha/a2"}, // stale
			}}})
			return err
		},
		func() error {
			_, err := b.Apply(ledger.Command{Org: "beta", Peer: PeerBeta, TaskStarted: &ledger.TaskStarted{Task: "alpha-1", Machine: "beta/b1"}})
			return err
		},
		func() error {
			_, err := b.Apply(ledger.Command{Org: "beta", Peer: PeerBeta, TaskEnded: &ledger.TaskEnded{Task: "alpha-1", Machine: "beta/b1", EnergyMilliJ: 12_345, Source: ledger.EnergyRAPL}})
			return err
		},
		func() error {
			_, err := b.Apply(ledger.Command{TaskStarted: &ledger.TaskStarted{Task: "beta-1", Machine: "alpha/a1"}})
			return err
		},
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("seed step %d: %w", i+1, err)
		}
	}
	b.SetLogs("alpha-1", api.StreamStdout, []byte("hello from alpha-1\n"))
	b.SetLogs("alpha-1", api.StreamStderr, []byte("warning: nothing\n"))
	if now == nil {
		now = func() int64 { return time.Now().UnixMilli() }
	}
	b.mu.Lock()
	b.now = now
	b.mu.Unlock()
	return b, nil
}

// TaskEvents is the log of the task transitions applied so far (GET
// /v1/events).
func (b *Backend) TaskEvents() *api.EventLog {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.events
}

// SetEventLog replaces the event log with l (a small one, to test what a
// client that falls behind it gets); call it before any command.
func (b *Backend) SetEventLog(l *api.EventLog) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = l
}

// DrainMachine implements api.MachineDrainer.
func (b *Backend) DrainMachine(_ context.Context, req api.DrainRequest) (api.MachineView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.writable(); err != nil {
		return api.MachineView{}, err
	}
	body := apiconv.DrainCommand(b.org, req)
	if _, err := b.apply(ledger.Command{DrainMachine: body}); err != nil {
		return api.MachineView{}, apiconv.Error(err)
	}
	m, _ := b.l.Machine(body.Machine)
	return apiconv.Machine(m), nil
}

var _ api.MachineDrainer = (*Backend)(nil)

// ReclaimMachine implements api.MachineReclaimer.
func (b *Backend) ReclaimMachine(_ context.Context, req api.ReclaimRequest) (api.MachineView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.writable(); err != nil {
		return api.MachineView{}, err
	}
	body := apiconv.ReclaimCommand(b.org, req)
	if _, err := b.apply(ledger.Command{ReclaimMachine: body}); err != nil {
		return api.MachineView{}, apiconv.Error(err)
	}
	m, _ := b.l.Machine(body.Machine)
	return apiconv.MachineAt(b.l, m, b.now()), nil
}

var _ api.MachineReclaimer = (*Backend)(nil)

// Timeline implements api.TimelineReader over the ledger, at this backend's
// clock.
func (b *Backend) Timeline(_ context.Context, q api.TimelineQuery) (api.TimelineView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	end := q.EndMs
	if end == 0 {
		end = b.now()
	}
	times := ledger.TimelineTimes(end, q.WindowS*1000, q.Points)
	hist, err := b.l.Timeline(times)
	if err != nil {
		return api.TimelineView{}, apiconv.Error(err)
	}
	return apiconv.Timeline(times, hist), nil
}

var _ api.TimelineReader = (*Backend)(nil)
