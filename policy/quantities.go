package policy

import (
	"math"
)

// The formulas below are seed 000 eqs. 3.1-3.11 (POLICY.md §1). They take
// exact integer sums and compute the float result the same way everywhere,
// so two implementations given the same sums agree bit for bit: IEEE
// division is correctly rounded, so equal ratios of exactly representable
// integers give equal floats and ties stay ties.

// DP is the power differential (Allocated − Quota) / Quota (eq. 3.10).
// An organisation that contributes nothing (Quota = 0) has DP = +Inf: it is
// served last and is always "in excess".
func DP(allocatedMFLOPS, quotaMFLOPS int64) float64 {
	if quotaMFLOPS <= 0 {
		return math.Inf(1)
	}
	return float64(allocatedMFLOPS-quotaMFLOPS) / float64(quotaMFLOPS)
}

// CSQ is the system/quota coefficient
// (PowerQuota_i / PowerSystem) · (ComputeSystem / Quota_i) (eq. 3.9).
// CSQ > 1: the organisation's machines are less efficient (GFLOPS/W) than the
// federation's.
func CSQ(powerQuotaMilliW, powerSystemMilliW, computeSystemMFLOPS, quotaMFLOPS int64) float64 {
	if quotaMFLOPS <= 0 || powerSystemMilliW <= 0 {
		return math.Inf(1)
	}
	return (float64(powerQuotaMilliW) / float64(powerSystemMilliW)) *
		(float64(computeSystemMFLOPS) / float64(quotaMFLOPS))
}

// PREPreempt is the expected remaining power of organisation z if machine y
// (of power d_y) is taken from it: (Allocated_z − Quota_z − d_y) / Quota_z
// (eq. 2.2 / 3.11).
func PREPreempt(allocatedZ, quotaZ, machineMFLOPS int64) float64 {
	return DP(allocatedZ-machineMFLOPS, quotaZ)
}

// PREAlloc is the power differential of organisation w if it is given machine
// y: (Allocated_w − Quota_w + d_y) / Quota_w (eq. 2.3).
func PREAlloc(allocatedW, quotaW, machineMFLOPS int64) float64 {
	return DP(allocatedW+machineMFLOPS, quotaW)
}

// Waste is the work (MFlop) lost if the task running on a machine of power
// mflops is stopped now (seed 000 eqs. 3.7 and 3.8).
//   - With a recorded checkpoint during this run, the work since that
//     checkpoint is lost (issue 5: a real checkpoint replaces the fixed block).
//   - With checkpointing in blocks of blockSeconds of execution, the
//     unfinished block is lost: (run · d) mod (block · d) = d · (run mod block).
//   - Without checkpointing (blockSeconds = 0), everything since the start.
func Waste(r Running, mflops int64, blockSeconds float64) float64 {
	d := float64(mflops)
	switch {
	case r.HasCheckpoint:
		return math.Max(0, r.SinceCheckpointSeconds) * d
	case blockSeconds > 0:
		return math.Mod(math.Max(0, r.RunSeconds), blockSeconds) * d
	default:
		return math.Max(0, r.RunSeconds) * d
	}
}

// Executed is the work (MFlop) the task has done since it last started.
func Executed(r Running, mflops int64) float64 {
	return math.Max(0, r.RunSeconds) * float64(mflops)
}

// Totals are the static per-organisation sums of a federation.
type Totals struct {
	// QuotaMFLOPS[i] = Σ d over i's machines (eq. 3.3).
	QuotaMFLOPS []int64
	// PowerQuotaMilliW[i] = Σ c over i's machines (eq. 3.1).
	PowerQuotaMilliW []int64
	// ComputeSystemMFLOPS and PowerSystemMilliW sum over every machine
	// (eqs. 3.4 and 3.2).
	ComputeSystemMFLOPS int64
	PowerSystemMilliW   int64
}

// ComputeTotals sums the machines of s by owner.
func ComputeTotals(s *State) Totals {
	t := Totals{
		QuotaMFLOPS:      make([]int64, len(s.Orgs)),
		PowerQuotaMilliW: make([]int64, len(s.Orgs)),
	}
	for _, m := range s.Machines {
		if m.Owner >= 0 && m.Owner < len(s.Orgs) {
			t.QuotaMFLOPS[m.Owner] += m.MFLOPS
			t.PowerQuotaMilliW[m.Owner] += m.BusyMilliW
		}
		t.ComputeSystemMFLOPS += m.MFLOPS
		t.PowerSystemMilliW += m.BusyMilliW
	}
	return t
}

// Usage is the dynamic per-organisation load of a State: what serves each
// organisation's tasks now and how many tasks it has waiting.
type Usage struct {
	// AllocatedMFLOPS[i] = Σ share·d over i's running tasks (d when each
	// takes a whole machine).
	AllocatedMFLOPS []int64
	// PIMilliW[i] = Σ share·c over i's running tasks (instantaneous power).
	PIMilliW []int64
	// Waiting[i] = E_i, the number of i's queued tasks.
	Waiting []int
}

// ComputeUsage sums the running tasks of s by the task's organisation.
func ComputeUsage(s *State) Usage {
	u := Usage{
		AllocatedMFLOPS: make([]int64, len(s.Orgs)),
		PIMilliW:        make([]int64, len(s.Orgs)),
		Waiting:         make([]int, len(s.Orgs)),
	}
	for _, r := range s.Running {
		if r.Task.Org < 0 || r.Task.Org >= len(s.Orgs) || r.Machine < 0 || r.Machine >= len(s.Machines) {
			continue
		}
		m := s.Machines[r.Machine]
		sh := ShareOf(m.Capacity, r.Task.Request)
		u.AllocatedMFLOPS[r.Task.Org] += sh.Of(m.MFLOPS)
		u.PIMilliW[r.Task.Org] += sh.Of(m.BusyMilliW)
	}
	for _, t := range s.Queued {
		if t.Org >= 0 && t.Org < len(s.Orgs) {
			u.Waiting[t.Org]++
		}
	}
	if s.Queue != nil {
		for i := range u.Waiting {
			u.Waiting[i] += s.Queue.Waiting(i)
		}
	}
	return u
}

// FinalState classifies an organisation at quiescence into the four states of
// seed 000 §3.4 (L988-999):
//
//	1: DP ≥ 0 and nothing waiting;   2: DP ≥ 0 with tasks waiting;
//	3: DP < 0 and nothing waiting;   4: DP < 0 with tasks waiting.
func FinalState(dp float64, waiting int) int {
	switch {
	case dp >= 0 && waiting == 0:
		return 1
	case dp >= 0:
		return 2
	case waiting == 0:
		return 3
	default:
		return 4
	}
}
