package scenario

import (
	"fmt"
	"strings"

	humanize "github.com/dustin/go-humanize"
	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
	"github.com/coopgrid/coopgrid/policy"
)

// Multi-core machines and task requests (issue 14; docs/SCENARIOS.md,
// "Machines with resources, tasks with requests"). The keys and their
// syntax are those of the executor's machines file (cpus, memory, gpus,
// labels) and of job files (cpus, memory, gpus, requirements); the values
// become the policy's types, the same the live federation's ledger builds.
var (
	capacityKeys = []string{"cpus", "memory", "gpus", "labels", "policy"}
	requestKeys  = []string{"cpus", "memory", "gpus", "requirements", "executable"}
	reqItemKeys  = []string{"attribute", "operator", "value"}
	// ownerKeys are the scheduler-visible part of an executor's owner
	// policy (docs/EXECUTOR.md): what a simulated machine's owner allows.
	ownerKeys = []string{"allow", "allow_any", "orgs"}
)

// Bounds on labels (the ledger's: ledger.MaxLabelBytes and friends).
const (
	maxLabels        = 64
	maxLabelValueLen = 64
)

// machineShape is what a machine group declares beyond power and draw.
type machineShape struct {
	capacity policy.Resources
	attrs    map[string]string // "label.NAME" -> value; nil without labels
	// owner is the owner's policy (nil: refuses nothing); ownerNode is
	// where it was declared, for the organisations it names, which are
	// checked once every organisation is known.
	owner     *policy.OwnerPolicy
	ownerOrgs []*yaml.Node // the nodes of owner.Orgs, in order
	ownerPath string
}

// taskShape is what a task (or every task of a type) asks of a machine.
// node is where it was declared, for the errors found once every machine
// is known.
type taskShape struct {
	request      policy.Resources
	requirements []policy.Requirement
	// executable is the task's argv[0] as owner policies see it ("": a
	// simulated task any owner allows).
	executable string
	node       *yaml.Node
	path       string
}

// declared says the shape asks for anything beyond one whole slot.
func (t taskShape) declared() bool {
	return t.request != (policy.Resources{}) || len(t.requirements) > 0 || t.executable != ""
}

// capacity reads a machine group's cpus, memory, gpus and labels.
func (d *decoder) capacity(m map[string]yamlfile.Entry, p string) (machineShape, bool) {
	var sh machineShape
	before := d.Count()
	if e, ok := m["cpus"]; ok {
		sh.capacity.CPUs, _ = d.integer(e.V, yamlfile.Join(p, "cpus"), 1, policy.MaxCPUs)
	}
	if e, ok := m["gpus"]; ok {
		sh.capacity.GPUs, _ = d.integer(e.V, yamlfile.Join(p, "gpus"), 0, policy.MaxGPUs)
	}
	if e, ok := m["memory"]; ok {
		sh.capacity.MemoryBytes, _ = d.memory(e.V, yamlfile.Join(p, "memory"))
	}
	if e, ok := m["labels"]; ok {
		sh.attrs = d.labels(e.V, yamlfile.Join(p, "labels"))
	}
	if e, ok := m["policy"]; ok {
		sh.ownerPath = yamlfile.Join(p, "policy")
		sh.owner, sh.ownerOrgs = d.owner(e.V, sh.ownerPath)
	}
	return sh, d.Count() == before
}

// owner reads a machine group's owner policy: allow (executables: absolute
// paths or bare names), allow_any, orgs (organisations besides the owner
// that may use the machines; empty: every one). As in an executor's
// machines file, a policy that allows nothing refuses every task that
// names an executable.
func (d *decoder) owner(n *yaml.Node, p string) (*policy.OwnerPolicy, []*yaml.Node) {
	_, m, _ := d.Mapping(n, p, ownerKeys)
	if m == nil {
		return nil, nil
	}
	var orgNodes []*yaml.Node
	pol := &policy.OwnerPolicy{}
	if e, ok := m["allow_any"]; ok {
		if e.V.Kind != yaml.ScalarNode || e.V.ShortTag() != "!!bool" {
			d.At(e.V, yamlfile.Join(p, "allow_any"), "must be true or false, got %s", yamlfile.Describe(e.V))
		} else {
			pol.AllowAny = e.V.Value == "true"
		}
	}
	if e, ok := m["allow"]; ok {
		ap := yamlfile.Join(p, "allow")
		items, _ := d.Sequence(e.V, ap)
		for i, it := range items {
			if x, ok := d.executable(it, yamlfile.Index(ap, i)); ok {
				pol.Allow = append(pol.Allow, x)
			}
		}
	}
	if e, ok := m["orgs"]; ok {
		op := yamlfile.Join(p, "orgs")
		items, _ := d.Sequence(e.V, op)
		for i, it := range items {
			if name, ok := d.name(it, yamlfile.Index(op, i)); ok {
				pol.Orgs = append(pol.Orgs, name)
				orgNodes = append(orgNodes, it)
			}
		}
	}
	return pol, orgNodes
}

// executable reads an executable as owner policies name it: an absolute
// path or a bare name, without spaces.
func (d *decoder) executable(n *yaml.Node, p string) (string, bool) {
	s, ok := d.text(n, p)
	if !ok {
		return "", false
	}
	if s == "" || len(s) > policy.MaxRequirementLen || strings.ContainsAny(s, " \t\n") || strings.Contains(s, "/") && !strings.HasPrefix(s, "/") {
		d.At(n, p, "%q: want an absolute path or a bare name (at most %d bytes, no spaces)", s, policy.MaxRequirementLen)
		return "", false
	}
	return s, true
}

// request reads a task's (or a type's) cpus, memory, gpus and requirements.
func (d *decoder) request(m map[string]yamlfile.Entry, at *yaml.Node, p string) (taskShape, bool) {
	sh := taskShape{node: at, path: p}
	before := d.Count()
	if e, ok := m["cpus"]; ok {
		sh.request.CPUs, _ = d.integer(e.V, yamlfile.Join(p, "cpus"), 1, policy.MaxCPUs)
	}
	if e, ok := m["gpus"]; ok {
		sh.request.GPUs, _ = d.integer(e.V, yamlfile.Join(p, "gpus"), 0, policy.MaxGPUs)
	}
	if e, ok := m["memory"]; ok {
		sh.request.MemoryBytes, _ = d.memory(e.V, yamlfile.Join(p, "memory"))
	}
	if e, ok := m["requirements"]; ok {
		sh.requirements = d.requirements(e.V, yamlfile.Join(p, "requirements"))
	}
	if e, ok := m["executable"]; ok {
		sh.executable, _ = d.executable(e.V, yamlfile.Join(p, "executable"))
	}
	return sh, d.Count() == before
}

// memory reads a size as the executor's machines file and job files do: a
// whole number of bytes, or a number with a unit as go-humanize reads it
// ("16GiB", "512 MiB", "2GB"). A machine's memory must be > 0 when given.
func (d *decoder) memory(n *yaml.Node, p string) (int64, bool) {
	if !d.Scalar(n, p, "a size") {
		return 0, false
	}
	if n.ShortTag() == "!!int" {
		return d.integer(n, p, 1, policy.MaxMemoryBytes)
	}
	if n.ShortTag() != "!!str" {
		d.At(n, p, "want a size such as 16GiB or 512MiB (or a number of bytes), got %s", yamlfile.Describe(n))
		return 0, false
	}
	b, err := humanize.ParseBytes(n.Value)
	if err != nil {
		d.At(n, p, "want a size such as 16GiB or 512MiB (or a number of bytes), got %q", n.Value)
		return 0, false
	}
	if b == 0 || b > policy.MaxMemoryBytes {
		d.At(n, p, "must be between 1 byte and 1 EiB, got %q", n.Value)
		return 0, false
	}
	return int64(b), true
}

// labels reads a list of "name" or "name=value" into the attributes that
// requirements test ("label.NAME").
func (d *decoder) labels(n *yaml.Node, p string) map[string]string {
	items, ok := d.Sequence(n, p)
	if !ok {
		return nil
	}
	if len(items) > maxLabels {
		d.At(n, p, "%d labels, more than %d", len(items), maxLabels)
		return nil
	}
	attrs := make(map[string]string, len(items))
	seen := map[string]int{}
	for i, it := range items {
		ip := yamlfile.Index(p, i)
		s, ok := d.text(it, ip)
		if !ok {
			continue
		}
		name, value, hasValue := strings.Cut(s, "=")
		if !policy.ValidAttributeName(name) || hasValue && (value == "" || len(value) > maxLabelValueLen || strings.ContainsAny(value, " \t,")) {
			d.At(it, ip, "%q: want name or name=value (name: 1-64 characters of [A-Za-z0-9._-] starting with a letter or digit; value: 1-%d characters, no spaces or commas)", s, maxLabelValueLen)
			continue
		}
		if line, dup := seen[name]; dup {
			d.At(it, ip, "label %q declared twice (first at line %d)", name, line)
			continue
		}
		seen[name] = it.Line
		attrs["label."+name] = value
	}
	return attrs
}

// requirements reads a list of {attribute, operator, value}, checked by the
// policy's own rule (policy.CheckRequirement) and blamed on the field at
// fault.
func (d *decoder) requirements(n *yaml.Node, p string) []policy.Requirement {
	items, ok := d.Sequence(n, p)
	if !ok {
		return nil
	}
	if len(items) > policy.MaxRequirements {
		d.At(n, p, "%d requirements, more than %d", len(items), policy.MaxRequirements)
		return nil
	}
	var out []policy.Requirement
	for i, it := range items {
		ip := yamlfile.Index(p, i)
		_, m, ok := d.Mapping(it, ip, reqItemKeys)
		if !ok {
			continue
		}
		var r policy.Requirement
		good := true
		for _, f := range []struct {
			key string
			dst *string
		}{{"attribute", &r.Attribute}, {"operator", &r.Operator}, {"value", &r.Value}} {
			e, ok := m[f.key]
			if !ok {
				if f.key != "value" {
					d.At(it, ip, "missing required key %q", f.key)
					good = false
				}
				continue
			}
			if *f.dst, ok = d.text(e.V, yamlfile.Join(ip, f.key)); !ok {
				good = false
			}
		}
		if !good {
			continue
		}
		if err := policy.CheckRequirement(r); err != nil {
			field := "value"
			switch {
			case strings.HasPrefix(err.Error(), "attribute"):
				field = "attribute"
			case strings.HasPrefix(err.Error(), "operator \""):
				field = "operator"
			}
			at := it
			if e, ok := m[field]; ok {
				at = e.V
			}
			d.At(at, yamlfile.Join(ip, field), "%v", err)
			continue
		}
		out = append(out, r)
	}
	return out
}

// policyMachine is one machine of group g of organisation org, as the
// policy sees it.
func (g group) policyMachine(id string, org int) policy.Machine {
	return policy.Machine{ID: id, Owner: org, MFLOPS: g.mflops, BusyMilliW: g.busyMilliW,
		Capacity: g.shape.capacity, Attrs: g.shape.attrs, Policy: g.shape.owner}
}

// checkShapes reports, at its declaration, every task shape that no machine
// of the scenario could ever run (its request larger than every machine,
// or a requirement every machine misses): such a task would wait forever.
// It also refuses the iSPD engine on a scenario that is not the papers'
// one-slot model: that engine places one task per machine.
func (d *decoder) checkShapes(s *Scenario, engineNode *yaml.Node) {
	// One machine per distinct group shape, one verdict per distinct task
	// shape: a hostile file of many groups and many tasks stays linear.
	var machines []policy.Machine
	seenMachine := map[string]bool{}
	orgs := make([]policy.Org, len(s.orgs))
	known := map[string]bool{}
	for i, o := range s.orgs {
		orgs[i].Name = o.name
		known[o.name] = true
	}
	for i, o := range s.orgs {
		for j, g := range o.groups {
			if pol := g.shape.owner; pol != nil {
				for k, name := range pol.Orgs {
					if !known[name] {
						d.At(g.shape.ownerOrgs[k], yamlfile.Join(g.shape.ownerPath, "orgs"), "unknown organisation %q", name)
					}
				}
			}
			key := fmt.Sprintf("%v|%v|%v", g.shape.capacity, g.shape.attrs, g.shape.owner) // fmt sorts map keys
			if g.count > 0 && !seenMachine[key] {
				seenMachine[key] = true
				machines = append(machines, g.policyMachine(fmt.Sprintf("%s.machines[%d]", yamlfile.Index("orgs", i), j), i))
			}
		}
	}
	verdict := map[string]string{} // task shape -> "" if some machine runs it, else why not
	var shapes []taskShape
	for _, t := range s.types {
		shapes = append(shapes, t.shape)
	}
	for _, t := range s.explicit {
		shapes = append(shapes, t.shape)
	}
	oneSlot := true
	for _, sh := range shapes {
		if !sh.declared() {
			continue
		}
		task := policy.Task{Request: sh.request, Requirements: sh.requirements, Executable: sh.executable}
		oneSlot = oneSlot && (&policy.State{Orgs: orgs, Queued: []policy.Task{task}}).OneSlot()
		key := fmt.Sprintf("%v|%v|%q", sh.request, sh.requirements, sh.executable)
		why, known := verdict[key]
		if !known {
			why = "no machine"
			for _, m := range machines {
				task.Org = m.Owner // the owner always may: only attributes, executable and size count here
				w := policy.Mismatch(m, task, orgs)
				if w == "" {
					why = ""
					break
				} else if why == "no machine" {
					why = w
				}
			}
			verdict[key] = why
		}
		if why != "" && len(machines) > 0 {
			d.At(sh.node, sh.path, "no machine of the scenario can ever run it (first machine group: %s)", why)
		}
	}
	if engineNode != nil && s.Engine == "ispd" && !(oneSlot && (&policy.State{Orgs: orgs, Machines: machines}).OneSlot()) {
		d.At(engineNode, "sim.engine", "the iSPD engine places one task per machine: it cannot run machines with cpus, memory, gpus or an owner policy, or tasks with requests (use the default engine)")
	}
}

// OneSlot says every machine of the scenario is one slot and every task
// takes a whole one (policy.State.OneSlot): the papers' model, the only
// one the iSPD engine runs.
func (in *Instance) OneSlot() bool {
	tasks := make([]policy.Task, len(in.Tasks))
	for i, t := range in.Tasks {
		tasks[i] = policy.Task{Org: t.Org, Request: t.Request, Requirements: t.Requirements, Executable: t.Executable}
	}
	return (&policy.State{Orgs: in.Orgs, Machines: in.Machines, Queued: tasks}).OneSlot()
}
