package apiconv

import (
	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// The ledger counts in integers (MFLOPS, MFlop, mW, mJ) so that sums are
// exact; the API speaks the units people read (GFLOPS, GFlop, W, J). These
// conversions are the one place where the two meet.

func gflops(mflops int64) float64 { return float64(mflops) / 1000 }
func watts(mW int64) float64      { return float64(mW) / 1000 }
func joules(mJ int64) float64     { return float64(mJ) / 1000 }

// Org converts an organisation with its derived quantities. Running counts
// assigned and running tasks: both hold a machine.
func Org(o ledger.OrgInfo) api.OrgView {
	v := api.OrgView{
		Name:         o.Name,
		Peer:         o.Peer,
		Machines:     o.Machines,
		QuotaGFLOPS:  gflops(o.QuotaMFLOPS),
		PowerQuotaW:  watts(o.PowerQuotaMilliW),
		LimitW:       watts(o.LimitMilliW),
		PIW:          watts(o.PIMilliW),
		AllocGFLOPS:  gflops(o.AllocatedMFLOPS),
		Queued:       o.Queued,
		Running:      o.Assigned + o.Running,
		Done:         o.Done,
		Failed:       o.Failed,
		Cancelled:    o.Cancelled,
		EnergyJ:      joules(o.Energy.UserMilliJ),
		OwnerEnergyJ: joules(o.Energy.OwnerMilliJ()),
	}
	if o.DP != nil {
		dp := *o.DP
		v.DP = &dp
	}
	return v
}

// Orgs converts a list of organisations, keeping the order; never nil.
func Orgs(os []ledger.OrgInfo) []api.OrgView {
	out := make([]api.OrgView, len(os))
	for i, o := range os {
		out[i] = Org(o)
	}
	return out
}

// Machine converts one machine with the ledger's last heartbeat (the
// daemon raises it to the latest one it heard by gossip).
func Machine(m ledger.Machine) api.MachineView {
	v := api.MachineView{
		ID:              m.ID,
		Org:             m.Org,
		GFLOPS:          gflops(m.MFLOPS),
		BusyW:           watts(m.BusyMilliW),
		IdleW:           watts(m.IdleMilliW),
		State:           string(m.State),
		Task:            m.Task,
		LastHeartbeatMs: m.LastHeartbeatMs,
		EffectiveGFLOPS: effectiveGFLOPS(m),
		SpeedMismatch:   m.SpeedMismatch(),
		Unprotected:     m.Unprotected,
		Drained:         m.Drained,
		Opportunistic:   m.Opportunistic,
		Reclaimed:       m.Reclaimed,
		CPUs:            m.CPUs,
		MemoryBytes:     m.MemoryBytes,
		GPUs:            m.GPUs,
		OS:              m.OS,
		Arch:            m.Arch,
		Labels:          append([]string(nil), m.Labels...),
	}
	if len(m.Also) > 0 {
		v.Tasks = m.Tasks()
	}
	if p := m.Owner; p != nil {
		v.OwnerPolicy = &api.OwnerPolicyView{AllowAny: p.AllowAny, Allow: append([]string(nil), p.Allow...),
			MaxWallMs: p.MaxWallMs, Orgs: append([]string(nil), p.Orgs...)}
	}
	return v
}

// MachinesAt converts every machine of l with its stability at nowMs
// (Ledger.MTBF), in ID order; never nil.
func MachinesAt(l *ledger.Ledger, nowMs int64) []api.MachineView {
	ms := l.Machines()
	out := make([]api.MachineView, len(ms))
	for i, m := range ms {
		out[i] = MachineAt(l, m, nowMs)
	}
	return out
}

// MachineAt is Machine with m's stability at nowMs in l.
func MachineAt(l *ledger.Ledger, m ledger.Machine, nowMs int64) api.MachineView {
	v := Machine(m)
	if st, ok := l.MTBF(m.ID, nowMs); ok && st.Tracked {
		v.Stability = &api.MachineStability{
			MTBFMs: st.MTBFMs, Failures: st.Failures, Reclaims: st.Reclaims, UpMs: st.UpMs, DownMs: st.DownMs,
			Availability: availability(st),
		}
	}
	return v
}

func availability(st ledger.Stability) float64 {
	if st.UpMs+st.DownMs == 0 {
		return 1
	}
	return float64(st.UpMs) / float64(st.UpMs+st.DownMs)
}

// effectiveGFLOPS is the corrected speed, or 0 while it is the declared one.
func effectiveGFLOPS(m ledger.Machine) float64 {
	if e := m.EffectiveMFLOPS(); e != m.MFLOPS {
		return gflops(e)
	}
	return 0
}

// Machines converts a list of machines, keeping the order; never nil.
func Machines(ms []ledger.Machine) []api.MachineView {
	out := make([]api.MachineView, len(ms))
	for i, m := range ms {
		out[i] = Machine(m)
	}
	return out
}

// TaskFilter converts the filters of GET /v1/tasks (checked by
// api.ValidateTaskQuery) to the ledger's. Limit is the caller's to apply.
func TaskFilter(q api.TaskQuery) ledger.TaskFilter {
	f := ledger.TaskFilter{Org: q.Org, Job: q.Job, After: q.After, Limit: q.Limit}
	for _, s := range q.States {
		f.States = append(f.States, ledger.TaskState(s))
	}
	return f
}

// Task converts one task to its list line. Machine is the machine holding
// the task, else the one of its latest run (where a finished task ran).
func Task(t *ledger.Task) api.TaskView {
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
		SizeGFlop:   gflops(t.SizeMFlop),
		SubmittedMs: t.SubmittedMs,
		EndedMs:     t.EndedMs,
		Seq:         t.Seq,
		Job:         t.Spec.Job,

		MachineFailures: t.MachineFailures,
		Failures:        t.Failures,
		Avoid:           append([]string(nil), t.Avoid...),
		Gang:            gangView(t.Spec.Gang),

		Class:        t.Spec.Class,
		DeadlineMs:   t.Spec.DeadlineMs,
		Migrations:   t.Migrations,
		DeadlineNote: t.DeadlineNote,
	}
}

// WithPredictions fills in the predicted finish of every running task of
// views (ledger.Ledger.PredictedFinishes).
func WithPredictions(views []api.TaskView, finish map[string]int64) {
	for i := range views {
		views[i].PredictedFinishMs = finish[views[i].ID]
	}
}

func gangView(g *ledger.Gang) *api.GangView {
	if g == nil {
		return nil
	}
	return &api.GangView{ID: g.ID, Rank: g.Rank, Size: g.Size}
}

// WithPending fills in the pending reason of every queued task of views
// (ledger.Ledger.Pending).
func WithPending(views []api.TaskView, reasons map[string]ledger.PendingReason) {
	for i := range views {
		if r, ok := reasons[views[i].ID]; ok && views[i].State == string(ledger.TaskQueued) {
			views[i].Pending, views[i].PendingDetail = r.Code, r.Detail
		}
	}
}

// Tasks converts a list of tasks, keeping the order; never nil.
func Tasks(ts []ledger.Task) []api.TaskView {
	out := make([]api.TaskView, len(ts))
	for i := range ts {
		out[i] = Task(&ts[i])
	}
	return out
}

// TaskDetail converts one task in detail; the view shares no memory with
// t. OutputFiles are not in the ledger: the daemon fills them in.
func TaskDetail(t *ledger.Task) api.TaskDetail {
	d := api.TaskDetail{
		TaskView:       Task(t),
		RemainingGFlop: gflops(t.RemainingMFlop),
		Argv:           append([]string{}, t.Spec.Argv...),
		WallLimitMs:    t.Spec.WallLimitMs,
		Inputs:         append([]string(nil), t.Spec.Inputs...),
		Outputs:        append([]string(nil), t.Spec.Outputs...),
		Checkpointable: t.Spec.Checkpointable,
		MaxAttempts:    t.Spec.MaxAttemptsOrDefault(),
		Retries:        t.Spec.Retries,
		Moldable:       MoldableView(t.Spec.Moldable),
	}
	if len(t.Spec.Env) > 0 {
		d.Env = make(map[string]string, len(t.Spec.Env))
		for k, v := range t.Spec.Env {
			d.Env[k] = v
		}
	}
	for _, s := range t.Segments {
		d.Segments = append(d.Segments, api.SegmentView{
			Machine:    s.Machine,
			MachineOrg: s.MachineOrg,
			StartMs:    s.StartMs,
			EndMs:      s.EndMs,
			EnergyJ:    joules(s.EnergyMilliJ),
			Source:     string(s.Source),
			Outcome:    string(s.Outcome),
		})
	}
	if c := t.Checkpoint; c != nil {
		d.Checkpoint = &api.CheckpointView{
			Hash:          c.Hash,
			SizeBytes:     c.SizeBytes,
			AtMs:          c.AtMs,
			ProgressGFlop: gflops(c.ProgressMFlop),
			Holders:       append([]string(nil), c.Holders...),
		}
	}
	return d
}

// Ledger builds GET /v1/ledger from the ledger's applied index, hash and
// organisations. Orgs is never nil.
func Ledger(applied uint64, hash string, orgs []ledger.OrgInfo) api.LedgerView {
	v := api.LedgerView{AppliedIndex: applied, StateHash: hash, Orgs: make([]api.LedgerAccount, len(orgs))}
	for i, o := range orgs {
		v.Orgs[i] = api.LedgerAccount{
			Org:          o.Name,
			UserJ:        joules(o.Energy.UserMilliJ),
			OwnerSelfJ:   joules(o.Energy.OwnerSelfMilliJ),
			OwnerOthersJ: joules(o.Energy.OwnerOthersMilliJ),
			LimitW:       watts(o.LimitMilliW),
			PIW:          watts(o.PIMilliW),
		}
	}
	return v
}
