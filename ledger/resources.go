package ledger

import (
	"slices"
	"strings"

	"github.com/coopgrid/coopgrid/policy"
)

// MachineResources are what a machine declares beyond its speed and draw
// (issue 14): its capacity, its attributes and its owner's policy. Every
// field is omitted while unset, so that a machine declared without them
// encodes, replays and hashes as before: one slot (one CPU) open to every
// task.
type MachineResources struct {
	// CPUs (0 means 1), MemoryBytes (0: not declared, not counted) and
	// GPUs are the capacity several tasks share (policy.Resources).
	CPUs        int64 `json:"cpus,omitempty"`
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	GPUs        int64 `json:"gpus,omitempty"`
	// OS and Arch are as Go names them (runtime.GOOS, runtime.GOARCH).
	OS   string `json:"os,omitempty"`
	Arch string `json:"arch,omitempty"`
	// Labels are free-form attributes, "name" or "name=value", sorted.
	Labels []string `json:"labels,omitempty"`
	// Owner is what the machine's owner lets run on it; nil refuses
	// nothing (machines declared before owner policies, simulated ones).
	Owner *OwnerPolicy `json:"owner_policy,omitempty"`
}

// OwnerPolicy is the replicated part of an executor's policy
// (executor.Policy) that the scheduler needs: the executables it allows,
// its cap on a run's wall-clock time, and which organisations may use the
// machine (policy.OwnerPolicy).
type OwnerPolicy struct {
	AllowAny  bool     `json:"allow_any,omitempty"`
	Allow     []string `json:"allow,omitempty"`
	MaxWallMs int64    `json:"max_wall_ms,omitempty"`
	// Orgs may use the machine besides its owner; empty: every organisation.
	Orgs []string `json:"orgs,omitempty"`
}

// TaskRequest is what a task asks of a machine: resources (CPUs 0 means 1)
// and attribute requirements (policy.Requirement). Omitted while unset, so
// that older specs encode as before.
type TaskRequest struct {
	CPUs         int64         `json:"cpus,omitempty"`
	MemoryBytes  int64         `json:"memory_bytes,omitempty"`
	GPUs         int64         `json:"gpus,omitempty"`
	Requirements []Requirement `json:"requirements,omitempty"`
}

// Requirement is policy.Requirement in the ledger's encoding.
type Requirement struct {
	Attribute string `json:"attribute"`
	Operator  string `json:"operator"`
	Value     string `json:"value,omitempty"`
}

// Bounds on declared attributes and policies.
const (
	MaxLabels       = 64
	MaxLabelBytes   = 128
	MaxAllow        = 256
	MaxPolicyOrgs   = 256
	MaxAttrValueLen = 64
)

func (r MachineResources) validate(name string) *Error {
	if r.CPUs < 0 || r.CPUs > policy.MaxCPUs || r.MemoryBytes < 0 || r.MemoryBytes > policy.MaxMemoryBytes || r.GPUs < 0 || r.GPUs > policy.MaxGPUs {
		return errf(CodeMalformed, "machine %q: cpus %d, memory %d bytes, gpus %d: want [0, %d], [0, %d], [0, %d]",
			name, r.CPUs, r.MemoryBytes, r.GPUs, policy.MaxCPUs, int64(policy.MaxMemoryBytes), policy.MaxGPUs)
	}
	for what, v := range map[string]string{"os": r.OS, "arch": r.Arch} {
		if v != "" && !policy.ValidAttributeName(v) {
			return errf(CodeMalformed, "machine %q: %s %q: want 1-64 characters of [A-Za-z0-9._-]", name, what, v)
		}
	}
	if len(r.Labels) > MaxLabels {
		return errf(CodeMalformed, "machine %q: %d labels, more than %d", name, len(r.Labels), MaxLabels)
	}
	for i, l := range r.Labels {
		if !ValidLabel(l) {
			return errf(CodeMalformed, "machine %q: label %q: want name or name=value (name: 1-64 characters of [A-Za-z0-9._-]; value: at most %d printable bytes without spaces or commas)", name, l, MaxAttrValueLen)
		}
		if i > 0 && labelName(r.Labels[i-1]) >= labelName(l) {
			return errf(CodeMalformed, "machine %q: labels must be sorted by name without duplicates (%q, %q)", name, r.Labels[i-1], l)
		}
	}
	if p := r.Owner; p != nil {
		if len(p.Allow) > MaxAllow || len(p.Orgs) > MaxPolicyOrgs {
			return errf(CodeMalformed, "machine %q: owner policy: at most %d allowed executables and %d organisations", name, MaxAllow, MaxPolicyOrgs)
		}
		for _, a := range p.Allow {
			if a == "" || len(a) > MaxArgBytes || strings.IndexByte(a, 0) >= 0 {
				return errf(CodeMalformed, "machine %q: owner policy: allowed executable %q: empty, too long or contains NUL", name, a)
			}
		}
		for _, o := range p.Orgs {
			if !validName(o) {
				return errf(CodeMalformed, "machine %q: owner policy: organisation %q: not a valid name", name, o)
			}
		}
		if p.MaxWallMs < 0 || p.MaxWallMs > MaxTimeMs {
			return errf(CodeMalformed, "machine %q: owner policy: max_wall_ms %d out of range", name, p.MaxWallMs)
		}
	}
	return nil
}

// ValidLabel reports whether l is a machine label: "name" or "name=value".
func ValidLabel(l string) bool {
	name, value, hasValue := strings.Cut(l, "=")
	if !policy.ValidAttributeName(name) || len(l) > MaxLabelBytes {
		return false
	}
	if !hasValue {
		return true
	}
	return value != "" && len(value) <= MaxAttrValueLen && printable(value) && !strings.ContainsAny(value, " \t,")
}

func labelName(l string) string { name, _, _ := strings.Cut(l, "="); return name }

// SortLabels sorts labels by name, the order a registration needs.
func SortLabels(ls []string) []string {
	out := slices.Clone(ls)
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(labelName(a), labelName(b)) })
	return out
}

func (r TaskRequest) validate() *Error {
	if r.CPUs < 0 || r.CPUs > policy.MaxCPUs || r.MemoryBytes < 0 || r.MemoryBytes > policy.MaxMemoryBytes || r.GPUs < 0 || r.GPUs > policy.MaxGPUs {
		return errf(CodeMalformed, "request: cpus %d, memory %d bytes, gpus %d: want [0, %d], [0, %d], [0, %d]",
			r.CPUs, r.MemoryBytes, r.GPUs, policy.MaxCPUs, int64(policy.MaxMemoryBytes), policy.MaxGPUs)
	}
	if len(r.Requirements) > policy.MaxRequirements {
		return errf(CodeMalformed, "requirements: %d, more than %d", len(r.Requirements), policy.MaxRequirements)
	}
	for i, q := range r.Requirements {
		if err := policy.CheckRequirement(q.policy()); err != nil {
			return errf(CodeMalformed, "requirements[%d]: %v", i, err)
		}
	}
	return nil
}

func (q Requirement) policy() policy.Requirement {
	return policy.Requirement{Attribute: q.Attribute, Operator: q.Operator, Value: q.Value}
}

// policyMachine is m as the policy sees it (without its owner index).
func (m *Machine) policyMachine(owner int) policy.Machine {
	pm := policy.Machine{ID: m.ID, Owner: owner, MFLOPS: m.EffectiveMFLOPS(), BusyMilliW: m.BusyMilliW, OwnerLoadPermille: m.OwnerLoadPermille,
		Capacity: policy.Resources{CPUs: m.CPUs, MemoryBytes: m.MemoryBytes, GPUs: m.GPUs}}
	if m.OS != "" || m.Arch != "" || len(m.Labels) > 0 {
		pm.Attrs = make(map[string]string, 2+len(m.Labels))
		if m.OS != "" {
			pm.Attrs["os"] = m.OS
		}
		if m.Arch != "" {
			pm.Attrs["arch"] = m.Arch
		}
		for _, l := range m.Labels {
			name, value, _ := strings.Cut(l, "=")
			pm.Attrs["label."+name] = value
		}
	}
	if p := m.Owner; p != nil {
		pm.Policy = &policy.OwnerPolicy{AllowAny: p.AllowAny, Allow: p.Allow, MaxWallMs: p.MaxWallMs, Orgs: p.Orgs}
	}
	return pm
}

// policyTask is t as the policy sees it.
func policyTask(t *Task, orgIdx map[string]int) policy.Task {
	pt := policy.Task{ID: t.ID, Org: orgIdx[t.Org], SizeMFlop: t.RemainingMFlop, Seq: t.Seq,
		Request:     policy.Resources{CPUs: t.Spec.CPUs, MemoryBytes: t.Spec.MemoryBytes, GPUs: t.Spec.GPUs},
		WallLimitMs: t.Spec.WallLimitMs, Avoid: slices.Clone(t.Avoid),
		Class: PolicyClass(t.Spec.Class), DeadlineMs: t.Spec.DeadlineMs, Gang: t.Spec.Gang != nil}
	if len(t.Spec.Argv) > 0 {
		pt.Executable = t.Spec.Argv[0]
	}
	for _, q := range t.Spec.Requirements {
		pt.Requirements = append(pt.Requirements, q.policy())
	}
	return pt
}

// share is the part of m that t takes.
func (m *Machine) share(t *Task) policy.Share {
	return policy.ShareOf(policy.Resources{CPUs: m.CPUs, MemoryBytes: m.MemoryBytes, GPUs: m.GPUs},
		policy.Resources{CPUs: t.Spec.CPUs, MemoryBytes: t.Spec.MemoryBytes, GPUs: t.Spec.GPUs})
}

// Tasks are the tasks placed on m (assigned or running), in placement order.
func (m *Machine) Tasks() []string {
	if m.Task == "" {
		return nil
	}
	return append([]string{m.Task}, m.Also...)
}

func (m *Machine) holds(task string) bool { return m.Task == task || slices.Contains(m.Also, task) }

func (m *Machine) addTask(task string) {
	if m.Task == "" {
		m.Task = task
		return
	}
	m.Also = append(m.Also, task)
}

func (m *Machine) removeTask(task string) {
	if m.Task == task {
		m.Task = ""
		if len(m.Also) > 0 {
			m.Task, m.Also = m.Also[0], m.Also[1:]
		}
	} else if i := slices.Index(m.Also, task); i >= 0 {
		m.Also = slices.Delete(slices.Clone(m.Also), i, i+1)
	}
	if len(m.Also) == 0 {
		m.Also = nil
	}
}

func (r MachineResources) clone() MachineResources {
	c := r
	c.Labels = slices.Clone(r.Labels)
	if r.Owner != nil {
		o := *r.Owner
		o.Allow, o.Orgs = slices.Clone(r.Owner.Allow), slices.Clone(r.Owner.Orgs)
		c.Owner = &o
	}
	return c
}

func (m *Machine) capacity() policy.Resources {
	return policy.Resources{CPUs: m.CPUs, MemoryBytes: m.MemoryBytes, GPUs: m.GPUs}.Capacity()
}

func (t *Task) request() policy.Resources {
	return policy.Resources{CPUs: t.Spec.CPUs, MemoryBytes: t.Spec.MemoryBytes, GPUs: t.Spec.GPUs}.Request()
}

// fits says t fits in what m's tasks leave free, once victim (if any)
// stops.
func (l *Ledger) fits(m *Machine, t, victim *Task) bool {
	var used policy.Resources
	for _, id := range m.Tasks() {
		if victim == nil || id != victim.ID {
			used = used.Plus(l.tasks[id].request())
		}
	}
	capa := m.capacity()
	return policy.Fits(t.request().Plus(used), capa, capa)
}

// mismatch says why t can never run on m (policy.Mismatch), or "".
func (l *Ledger) mismatch(m *Machine, t *Task) string {
	orgs := []policy.Org{{Name: m.Org}, {Name: t.Org}}
	return policy.Mismatch(m.policyMachine(0), policyTask(t, map[string]int{m.Org: 0, t.Org: 1}), orgs)
}

// checkFits refuses (CodeNoMachineFits) a task that asks for more of a
// resource than every registered machine has: it could never run. A
// federation without machines yet refuses nothing. Requests that fit some
// machine each, but no one machine together, are queued: their pending
// reason says so.
func (l *Ledger) checkFits(ts []TaskSpec) *Error {
	if len(l.machines) == 0 {
		return nil
	}
	var most policy.Resources
	anyMemory := false // a machine that declares no memory takes any request
	for _, m := range l.machines {
		c := m.capacity()
		most.CPUs, most.GPUs = max(most.CPUs, c.CPUs), max(most.GPUs, c.GPUs)
		most.MemoryBytes = max(most.MemoryBytes, c.MemoryBytes)
		anyMemory = anyMemory || c.MemoryBytes == 0
	}
	for i, t := range ts {
		r := policy.Resources{CPUs: t.Spec.CPUs, MemoryBytes: t.Spec.MemoryBytes, GPUs: t.Spec.GPUs}.Request()
		switch {
		case r.MemoryBytes > most.MemoryBytes && !anyMemory:
			return errf(CodeNoMachineFits, "tasks[%d]: asks for %d bytes of memory; the largest machine of the federation has %d", i, r.MemoryBytes, most.MemoryBytes)
		case r.CPUs > most.CPUs:
			return errf(CodeNoMachineFits, "tasks[%d]: asks for %d CPUs; the largest machine of the federation has %d", i, r.CPUs, most.CPUs)
		case r.GPUs > most.GPUs:
			return errf(CodeNoMachineFits, "tasks[%d]: asks for %d GPUs; the most any machine of the federation has is %d", i, r.GPUs, most.GPUs)
		}
	}
	return nil
}

// ShareOf is the part of x, a figure of the whole machine m (its draw, or
// the energy measured or declared for it over a run), that task t's share
// of m accounts for: x itself on a one-slot machine or for a task that
// takes the whole machine.
func (m *Machine) ShareOf(t *Task, x int64) int64 { return m.share(t).Of(x) }
