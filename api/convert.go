package api

import (
	"errors"

	"github.com/coopgrid/coopgrid/jobfile"
	"github.com/coopgrid/coopgrid/ledger"
)

// The ledger counts in integers (MFLOPS, MFlop, mW, mJ) so that sums are
// exact; the API speaks the units people read (GFLOPS, GFlop, W, J). These
// conversions are the one place where the two meet, shared by the daemon
// and by tests that serve a real ledger.

func gflops(mflops int64) float64 { return float64(mflops) / 1000 }
func watts(mW int64) float64      { return float64(mW) / 1000 }
func joules(mJ int64) float64     { return float64(mJ) / 1000 }

// OrgFromLedger converts an organisation with its derived quantities.
// Running counts assigned and running tasks: both hold a machine.
func OrgFromLedger(o ledger.OrgInfo) OrgView {
	v := OrgView{
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

// OrgsFromLedger converts a list of organisations, keeping the order.
func OrgsFromLedger(os []ledger.OrgInfo) []OrgView {
	out := make([]OrgView, len(os))
	for i, o := range os {
		out[i] = OrgFromLedger(o)
	}
	return out
}

// MachineFromLedger converts one machine.
func MachineFromLedger(m ledger.Machine) MachineView {
	return MachineView{
		ID:              m.ID,
		Org:             m.Org,
		GFLOPS:          gflops(m.MFLOPS),
		BusyW:           watts(m.BusyMilliW),
		IdleW:           watts(m.IdleMilliW),
		State:           string(m.State),
		Task:            m.Task,
		LastHeartbeatMs: m.LastHeartbeatMs,
	}
}

// TaskFromLedger converts one task to its list line. Machine is the
// machine holding the task, else the one of its latest run (where a
// finished task ran), as the daemon shows it.
func TaskFromLedger(t ledger.Task) TaskView {
	machine := t.Machine
	if machine == "" && len(t.Segments) > 0 {
		machine = t.Segments[len(t.Segments)-1].Machine
	}
	return TaskView{
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
	}
}

// TaskDetailFromLedger converts one task in detail. OutputFiles are not in
// the ledger; the daemon fills them in.
func TaskDetailFromLedger(t ledger.Task) TaskDetail {
	d := TaskDetail{
		TaskView:       TaskFromLedger(t),
		RemainingGFlop: gflops(t.RemainingMFlop),
		Argv:           append([]string(nil), t.Spec.Argv...),
		WallLimitMs:    t.Spec.WallLimitMs,
		Inputs:         append([]string(nil), t.Spec.Inputs...),
		Outputs:        append([]string(nil), t.Spec.Outputs...),
		Checkpointable: t.Spec.Checkpointable,
	}
	if d.Argv == nil {
		d.Argv = []string{}
	}
	if len(t.Spec.Env) > 0 {
		d.Env = make(map[string]string, len(t.Spec.Env))
		for k, v := range t.Spec.Env {
			d.Env[k] = v
		}
	}
	for _, s := range t.Segments {
		d.Segments = append(d.Segments, SegmentView{
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
		d.Checkpoint = &CheckpointView{
			Hash:          c.Hash,
			SizeBytes:     c.SizeBytes,
			AtMs:          c.AtMs,
			ProgressGFlop: gflops(c.ProgressMFlop),
			Holders:       append([]string(nil), c.Holders...),
		}
	}
	return d
}

// LedgerFromLedger builds GET /v1/ledger from the ledger's applied index,
// hash and organisations.
func LedgerFromLedger(applied uint64, hash string, orgs []ledger.OrgInfo) LedgerView {
	v := LedgerView{AppliedIndex: applied, StateHash: hash, Orgs: make([]LedgerAccount, len(orgs))}
	for i, o := range orgs {
		v.Orgs[i] = LedgerAccount{
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

// TaskSpecsToLedger converts a validated submission to the ledger's task
// specs. Input contents do not go into the log, only their names and
// sha256 digests (Spec.InputDigests): the submitting peer keeps the data
// and the machine that runs the task fetches and verifies it. An input's
// Digest is used when set (ResolveBlobs has checked it), else computed.
func TaskSpecsToLedger(req SubmitRequest) []ledger.TaskSpec {
	out := make([]ledger.TaskSpec, len(req.Tasks))
	for i, t := range req.Tasks {
		s := ledger.Spec{
			Name:           t.Name,
			Argv:           append([]string(nil), t.Argv...),
			WallLimitMs:    t.WallLimitMs,
			Outputs:        append([]string(nil), t.Outputs...),
			Checkpointable: t.Checkpointable,
		}
		if len(t.Env) > 0 {
			s.Env = make(map[string]string, len(t.Env))
			for k, v := range t.Env {
				s.Env[k] = v
			}
		}
		for _, in := range t.Inputs {
			d := in.Digest
			if d == "" {
				d = digestOf(in.Data)
			}
			s.Inputs = append(s.Inputs, in.Name)
			s.InputDigests = append(s.InputDigests, d)
		}
		out[i] = ledger.TaskSpec{SizeMFlop: t.SizeMFlop, Spec: s}
	}
	return out
}

// ErrorFromLedger maps a ledger rejection (*ledger.Error, possibly wrapped)
// to the API error with the matching status; any other error is returned
// unchanged (and served as 500 internal).
//
//	malformed, bad_version                               → bad_request
//	unknown_org, unknown_machine, unknown_task           → not_found
//	not_owner                                            → forbidden
//	exists, machine_busy, machine_down, limit_exceeded,
//	bad_state, stale                                     → conflict
//	overflow, anything else                              → internal
func ErrorFromLedger(err error) error {
	var le *ledger.Error
	if err == nil || !errors.As(err, &le) {
		return err
	}
	code := CodeInternal
	switch le.Code {
	case ledger.CodeMalformed, ledger.CodeBadVersion:
		code = CodeBadRequest
	case ledger.CodeUnknownOrg, ledger.CodeUnknownMachine, ledger.CodeUnknownTask:
		code = CodeNotFound
	case ledger.CodeNotOwner:
		code = CodeForbidden
	case ledger.CodeExists, ledger.CodeMachineBusy, ledger.CodeMachineDown,
		ledger.CodeLimitExceeded, ledger.CodeBadState, ledger.CodeStale:
		code = CodeConflict
	}
	return &Error{Status: StatusOf(code), Code: code, Message: le.Msg + " (ledger: " + string(le.Code) + ")"}
}

// SubmitRequestFromJob turns a parsed job file into the request that
// submits it. Tasks that ship the same file share its bytes.
func SubmitRequestFromJob(job *jobfile.Job) SubmitRequest {
	req := SubmitRequest{Job: job.Name, Tasks: make([]SubmitTask, len(job.Tasks))}
	for i, t := range job.Tasks {
		st := SubmitTask{
			Name:           t.Name,
			Argv:           t.Argv,
			Env:            t.Env,
			SizeMFlop:      t.SizeMFlop,
			WallLimitMs:    t.WallClockLimit.Milliseconds(),
			Outputs:        t.Outputs,
			Checkpointable: t.Checkpointable,
		}
		// A limit under a millisecond still limits.
		if st.WallLimitMs == 0 && t.WallClockLimit > 0 {
			st.WallLimitMs = 1
		}
		for _, in := range t.Inputs {
			st.Inputs = append(st.Inputs, InputFile{Name: in.Name, Data: in.Data})
		}
		req.Tasks[i] = st
	}
	return req
}
