package jobfile

import (
	"time"

	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// Moldable tasks (seed 002 chapter 5, SA; docs/JOBS.md, "Moldable jobs"):
// `alternatives:` lists the requests a task may run with, each a mapping
// of nodes, cpus and wall_clock_limit; a key left out takes the task's
// value (after the defaults). The submitting peer picks one at submission
// (SA_s): the one its view of the federation predicts ends first.
const (
	// MaxAlternatives bounds one task's alternatives (policy.MaxSAAlternatives).
	MaxAlternatives = 16
	// MaxMoldableTasks bounds the tasks with alternatives in one job: the
	// peer simulates its queue once per such task (api.MaxMoldablePerSubmit).
	MaxMoldableTasks = 100
)

// Alternative is one request a moldable task may run with, resolved: Nodes
// ≥ 1, CPUs ≥ 0 (0: DefaultCPUs), WallClockLimit > 0.
type Alternative struct {
	Nodes          int
	CPUs           int64
	WallClockLimit time.Duration
}

var alternativeKeys = []string{"nodes", "cpus", "wall_clock_limit"}

// altField is one alternative as written: nil fields were not given.
type altField struct {
	node  *yaml.Node
	path  string
	nodes *int64
	cpus  *int64
	wall  *time.Duration
}

type altList struct {
	node  *yaml.Node
	path  string
	items []altField
}

// alternatives reads the alternatives key.
func (d *decoder) alternatives(n *yaml.Node, p string) *altList {
	items, ok := d.Sequence(n, p)
	if !ok {
		return nil
	}
	if len(items) < 2 || len(items) > MaxAlternatives {
		d.At(n, p, "%d alternatives: want 2 to %d (a task with one request needs none)", len(items), MaxAlternatives)
		return nil
	}
	l := &altList{node: n, path: p}
	good := true
	for i, it := range items {
		ip := yamlfile.Index(p, i)
		_, m, ok := d.Mapping(it, ip, alternativeKeys)
		if !ok || len(m)*2 != len(it.Content) {
			good = false
			continue
		}
		if len(m) == 0 {
			d.At(it, ip, "empty: give nodes, cpus or wall_clock_limit")
			good = false
			continue
		}
		a := altField{node: it, path: ip}
		for _, e := range yamlfile.InOrder(it, m) {
			kp := yamlfile.Join(ip, e.Key)
			switch e.Key {
			case "nodes":
				v, ok := d.integer(e.V, kp, 1, MaxNodes)
				a.nodes, good = &v, good && ok
			case "cpus":
				v, ok := d.integer(e.V, kp, 1, maxCPUs)
				a.cpus, good = &v, good && ok
			case "wall_clock_limit":
				v, ok := d.duration(e.V, kp, d.opts.MaxWallClock)
				a.wall, good = &v, good && ok
			}
		}
		l.items = append(l.items, a)
	}
	if !good {
		return nil
	}
	return l
}

// altsOf is the alternatives that apply to a task: its own, else the
// defaults'; invalid says one of them was given wrong (reported).
func altsOf(t, defs *fields) (l *altList, invalid bool) {
	if t.invalid["alternatives"] || (t.alts == nil && defs.invalid["alternatives"]) {
		return nil, true
	}
	if t.alts != nil {
		return t.alts, false
	}
	return defs.alts, false
}

// mergeAlternatives resolves the alternatives of p over its own nodes,
// cpus and wall_clock_limit, checks them, and makes the first one p's
// request: what runs when no peer chooses.
func (d *decoder) mergeAlternatives(p *plan, t, defs *fields) bool {
	l, invalid := altsOf(t, defs)
	if invalid {
		return false
	}
	if l == nil {
		return true
	}
	shared := l != t.alts
	if p.class != "" {
		d.report(l.node, l.path, shared, "a task with alternatives has no class: SA chooses its request by the predicted end, not a deadline")
		return false
	}
	seen := map[Alternative]int{}
	for i, a := range l.items {
		r := Alternative{Nodes: max(p.nodes, 1), CPUs: p.cpus, WallClockLimit: p.wall}
		if a.nodes != nil {
			r.Nodes = int(*a.nodes)
		}
		if a.cpus != nil {
			r.CPUs = *a.cpus
		}
		if a.wall != nil {
			r.WallClockLimit = *a.wall
		}
		if r.WallClockLimit <= 0 {
			d.report(a.node, a.path, shared, "missing wall_clock_limit (set it here, on the task or in defaults)")
			return false
		}
		key := r
		key.CPUs = max(key.CPUs, DefaultCPUs)
		if j, dup := seen[key]; dup {
			d.report(a.node, a.path, shared, "the same request as alternative %d", j)
			return false
		}
		seen[key] = i
		p.alts = append(p.alts, r)
	}
	p.altsNode, p.altsPath = l.node, l.path
	first := p.alts[0]
	p.nodes, p.cpus, p.wall = first.Nodes, first.CPUs, first.WallClockLimit
	if p.nodes == 1 {
		p.nodes = 0
	}
	return true
}

// checkMoldableCount holds a job to MaxMoldableTasks tasks with
// alternatives.
func (d *decoder) checkMoldableCount(plans []*plan, tasks []Task) {
	n := 0
	for _, t := range tasks {
		if len(t.Alternatives) > 0 {
			n++
		}
	}
	if n <= MaxMoldableTasks {
		return
	}
	for _, p := range plans {
		if p.altsNode != nil {
			d.Once(p.altsNode, p.altsPath, nil, "%d tasks with alternatives in one job, at most %d: the peer simulates its queue for each", n, MaxMoldableTasks)
			return
		}
	}
}
