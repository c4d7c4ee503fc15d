// Package scenario reads the YAML scenario files of the simulator (a
// federation of organisations with their machines and power limits, and a
// workload) and turns them into concrete, fully resolved Instances.
//
// The file format is documented in docs/SCENARIOS.md; the examples are in
// examples/scenarios/. Parsing is strict (unknown keys, wrong types and
// out-of-range values are errors naming file, line, column and field) and
// exact (decimal GFLOPS and watts become integer MFLOPS and milliwatts
// without float rounding). Drawing an Instance is deterministic: the same
// Scenario, Options and seed give the same Instance bit for bit.
package scenario

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
	"github.com/coopgrid/coopgrid/policy"
	"gopkg.in/yaml.v3"
)

// Size bounds. They keep every sum the policy computes far from int64
// overflow (1e6 machines of 1e12 MFLOPS is 1e18 < 9.2e18) and keep a
// hostile 1 MiB file from asking for gigabytes of tasks.
const (
	// MaxFileBytes is the largest scenario file accepted.
	MaxFileBytes = 1 << 20
	// maxDepth bounds YAML nesting; the format itself needs 6 levels.
	maxDepth       = 16
	maxMachines    = 1_000_000
	maxTasks       = 1_000_000
	maxMFLOPS      = 1_000_000_000_000     // 1e9 GFLOPS per machine
	maxMilliW      = 1_000_000_000         // 1 MW per machine
	maxSizeMFlop   = 1_000_000_000_000_000 // 1e12 GFlop per task
	maxNameLen     = 64
	defaultCkpt    = 300.0 // the dissertation's 5-minute checkpoint block
	defaultTick    = 30.0  // the paper's scheduling period (seed 000 L645)
	defaultLate    = 600.0 // the dissertation's 10-minute late submission
	noneOrg        = "none"
	maxDescription = 4096
)

// Scenario is a parsed scenario file. It holds the federation and the
// workload's recipe; Instance draws concrete task sizes from a seed.
type Scenario struct {
	// File is the name given to Parse (the path given to Load).
	File string
	// Name is the scenario's name: the `name` key, else the file's base
	// name without extension.
	Name        string
	Description string
	// CheckpointSeconds is the default checkpoint block in seconds of run
	// time; 0 means no checkpointing. The simulator's --checkpoint flag
	// overrides it.
	CheckpointSeconds float64
	// TickSeconds is the default period of the scheduler's tick; 0 means
	// events only.
	TickSeconds float64
	// LateOrg is the organisation that submits late when Options.Late is
	// empty ("" = nobody).
	LateOrg string
	// LateDelaySeconds is when the late organisation starts submitting.
	LateDelaySeconds float64
	// Engine is the simulator's engine the file asks for (`sim.engine`):
	// "" or "default" for this project's model, "ispd" for the author's
	// iSPD semantics (lab/sim/ispd.go). The --engine flag overrides it.
	Engine string

	orgs     []orgSpec
	types    []taskType
	explicit []explicitTask
}

type orgSpec struct {
	name      string
	limit     limit
	limitNode *yaml.Node // for errors found when resolving it
	delay     float64
	groups    []group
	mix       []int // tasks per type, indexed like Scenario.types
}

type group struct {
	count      int
	mflops     int64
	busyMilliW int64
	idleMilliW int64
	shape      machineShape
}

type taskType struct {
	name     string
	min, max int64 // MFlop, inclusive
	shape    taskShape
}

type explicitTask struct {
	id     string
	org    int
	size   int64 // MFlop
	submit float64
	shape  taskShape
}

// OrgNames returns the organisations' names in file order.
func (s *Scenario) OrgNames() []string {
	names := make([]string, len(s.orgs))
	for i, o := range s.orgs {
		names[i] = o.name
	}
	return names
}

// Load reads and parses a scenario file.
func Load(path string) (*Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load scenario: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load scenario %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse parses a scenario from data; filename only labels errors (and gives
// the default name). Every error names the file; a problem inside the file
// also names line, column and field path. Several problems are reported
// together (joined, one per line), up to a limit.
func Parse(filename string, data []byte) (*Scenario, error) {
	if len(data) > MaxFileBytes {
		return nil, &yamlfile.Error{File: filename, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileBytes)}
	}
	root, err := yamlDocument.Decode(filename, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{ErrorList: yamlfile.ErrorList{File: filename}}
	d.check(root, "", 0)
	if err := d.Err(); err != nil {
		return nil, err
	}
	s := d.scenario(root, filename)
	if err := d.Err(); err != nil {
		return nil, err
	}
	return s, nil
}

// yamlDocument reads a scenario file. Without ParserLines: the line of a
// libyaml parser error stays as yaml.v3 gives it, as the parse tests pin.
var yamlDocument = yamlfile.Document{Empty: "empty file: a scenario needs at least `orgs`"}

// decoder walks the YAML tree, collecting errors.
type decoder struct {
	yamlfile.ErrorList
}

// check rejects aliases and merge keys (the format has no use for them and
// they are how YAML documents blow up) and excessive nesting, before any
// field is read.
func (d *decoder) check(n *yaml.Node, path string, depth int) {
	if depth > maxDepth {
		d.At(n, path, "nested more than %d levels deep", maxDepth)
		return
	}
	if n.Kind == yaml.AliasNode {
		d.At(n, path, "aliases (*%s) are not supported: write the value out", n.Value)
		return
	}
	if n.ShortTag() == "!!merge" {
		d.At(n, path, "merge keys (<<) are not supported: write the keys out")
		return
	}
	for _, c := range n.Content {
		d.check(c, path, depth+1)
		if d.Count() > 0 {
			return
		}
	}
}

// text reads a string scalar (numbers are accepted as their text, so that
// `name: 2024` works).
func (d *decoder) text(n *yaml.Node, path string) (string, bool) {
	if !d.Scalar(n, path, "a string") {
		return "", false
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float":
		return n.Value, true
	}
	d.At(n, path, "must be a string, got %s", yamlfile.Describe(n))
	return "", false
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// name reads an identifier: organisation, task type or task id. They appear
// in generated ids, CSV files and command lines, hence the plain alphabet.
func (d *decoder) name(n *yaml.Node, path string) (string, bool) {
	s, ok := d.text(n, path)
	if !ok {
		return "", false
	}
	if len(s) > maxNameLen || !nameRE.MatchString(s) {
		d.At(n, path, "must be 1-%d letters, digits, '_', '.' or '-' starting with a letter or digit, got %q", maxNameLen, s)
		return "", false
	}
	return s, true
}

// required reports a missing key at the mapping.
func (d *decoder) required(m map[string]yamlfile.Entry, n *yaml.Node, path, key string) (*yaml.Node, bool) {
	e, ok := m[key]
	if !ok {
		d.At(n, path, "missing required key %q", key)
		return nil, false
	}
	return e.V, true
}

var (
	topKeys   = []string{"name", "description", "sim", "late", "types", "orgs", "tasks"}
	simKeys   = []string{"checkpoint", "tick", "engine"}
	lateKeys  = []string{"org", "delay"}
	typeKeys  = append([]string{"name", "gflop", "minutes", "on"}, requestKeys...)
	orgKeys   = []string{"name", "limit", "delay", "machines", "mix"}
	groupKeys = append([]string{"count", "gflops", "mflops", "watts", "idle_watts"}, capacityKeys...)
	taskKeys  = append([]string{"id", "org", "gflop", "submit"}, requestKeys...)
)

func (d *decoder) scenario(root *yaml.Node, filename string) *Scenario {
	base := filepath.Base(filename)
	s := &Scenario{
		File:              filename,
		Name:              strings.TrimSuffix(base, filepath.Ext(base)),
		CheckpointSeconds: defaultCkpt,
		TickSeconds:       defaultTick,
		LateDelaySeconds:  defaultLate,
	}
	_, top, ok := d.Mapping(root, "", topKeys)
	if !ok {
		return s
	}
	if e, ok := top["name"]; ok {
		if v, ok := d.text(e.V, "name"); ok {
			s.Name = v
		}
	}
	if e, ok := top["description"]; ok {
		if v, ok := d.text(e.V, "description"); ok {
			if len(v) > maxDescription {
				d.At(e.V, "description", "longer than %d bytes", maxDescription)
			}
			s.Description = v
		}
	}
	if e, ok := top["sim"]; ok {
		d.sim(e.V, s)
	}

	orgsNode, ok := d.required(top, root, "", "orgs")
	machinesOK := false
	if ok {
		machinesOK = d.orgs(orgsNode, s)
	}
	if machinesOK {
		d.checkLimits(s)
	}
	if e, ok := top["types"]; ok {
		d.types(e.V, s, machinesOK)
	}
	if ok && len(s.orgs) > 0 {
		d.mixes(orgsNode, s)
	}
	if e, ok := top["tasks"]; ok {
		d.tasks(e.V, s)
	}
	if e, ok := top["late"]; ok {
		d.late(e.V, s)
	}
	if machinesOK && d.Count() == 0 {
		d.checkShapes(s, engineNode(top))
	}
	return s
}

func (d *decoder) sim(n *yaml.Node, s *Scenario) {
	_, m, _ := d.Mapping(n, "sim", simKeys)
	if e, ok := m["engine"]; ok {
		if v, ok := d.text(e.V, "sim.engine"); ok {
			if !slices.Contains(Engines, v) {
				d.At(e.V, "sim.engine", "unknown engine %q (want %s)", v, strings.Join(Engines, " or "))
			} else {
				s.Engine = v
			}
		}
	}
	for _, key := range simKeys[:2] {
		e, ok := m[key]
		if !ok {
			continue
		}
		p := yamlfile.Join("sim", key)
		v, ok := d.seconds(e.V, p, true)
		if !ok {
			continue
		}
		if v == 0 && !strings.EqualFold(e.V.Value, "off") {
			d.At(e.V, p, `must be > 0, got %s (write "off" to disable)`, e.V.Value)
			continue
		}
		if key == "checkpoint" {
			s.CheckpointSeconds = v
		} else {
			s.TickSeconds = v
		}
	}
}

func (d *decoder) late(n *yaml.Node, s *Scenario) {
	_, m, _ := d.Mapping(n, "late", lateKeys)
	if e, ok := m["org"]; ok {
		if v, ok := d.name(e.V, "late.org"); ok {
			if !slices.Contains(s.OrgNames(), v) {
				d.At(e.V, "late.org", "unknown organisation %q (have %s)", v, strings.Join(s.OrgNames(), ", "))
			} else {
				s.LateOrg = v
			}
		}
	}
	if e, ok := m["delay"]; ok {
		if v, ok := d.seconds(e.V, "late.delay", false); ok {
			s.LateDelaySeconds = v
		}
	}
}

// orgs reads the organisations and their machines; it returns whether all
// machines were read without error (the task types measured in minutes on
// the mean or best machine need them).
func (d *decoder) orgs(n *yaml.Node, s *Scenario) bool {
	before := d.Count()
	items, ok := d.Sequence(n, "orgs")
	if !ok {
		return false
	}
	if len(items) == 0 {
		d.At(n, "orgs", "at least one organisation is needed")
		return false
	}
	seen := map[string]int{}
	total := 0
	for i, it := range items {
		p := yamlfile.Index("orgs", i)
		o := orgSpec{}
		_, m, _ := d.Mapping(it, p, orgKeys)
		if m == nil {
			// Keep indices aligned with the file for the later passes.
			s.orgs = append(s.orgs, o)
			continue
		}
		if v, ok := d.required(m, it, p, "name"); ok {
			if name, ok := d.name(v, yamlfile.Join(p, "name")); ok {
				switch {
				case strings.EqualFold(name, noneOrg):
					d.At(v, yamlfile.Join(p, "name"), "%q is reserved (it means nobody for --late)", name)
				case seen[name] > 0:
					d.At(v, yamlfile.Join(p, "name"), "duplicate organisation %q (first at line %d)", name, seen[name])
				default:
					seen[name] = v.Line
				}
				o.name = name
			}
		}
		if e, ok := m["limit"]; ok {
			if text, ok := d.text(e.V, yamlfile.Join(p, "limit")); ok {
				if isNumberTag(e.V) {
					d.At(e.V, yamlfile.Join(p, "limit"), "a bare number is ambiguous: %s", limitSyntax)
				} else if l, err := parseLimit(text); err != nil {
					d.At(e.V, yamlfile.Join(p, "limit"), "%v", err)
				} else {
					o.limit, o.limitNode = l, e.V
				}
			}
		}
		if e, ok := m["delay"]; ok {
			if v, ok := d.seconds(e.V, yamlfile.Join(p, "delay"), false); ok {
				o.delay = v
			}
		}
		if v, ok := d.required(m, it, p, "machines"); ok {
			o.groups = d.groups(v, yamlfile.Join(p, "machines"), o.name)
			for _, g := range o.groups {
				total += g.count
			}
		}
		s.orgs = append(s.orgs, o)
	}
	if total > maxMachines {
		d.At(n, "orgs", "%d machines in all, more than %d", total, maxMachines)
	}
	return d.Count() == before
}

// checkLimits resolves the limits written in the file once, so that a
// percentage too large to represent is reported with its position rather
// than later by Instance.
func (d *decoder) checkLimits(s *Scenario) {
	var system int64
	pq := make([]int64, len(s.orgs))
	for i, o := range s.orgs {
		for _, g := range o.groups {
			pq[i] += int64(g.count) * g.busyMilliW
		}
		system += pq[i]
	}
	for i, o := range s.orgs {
		if o.limitNode == nil {
			continue
		}
		if _, err := o.limit.resolve(pq[i], system); err != nil {
			d.At(o.limitNode, yamlfile.Join(yamlfile.Index("orgs", i), "limit"), "%v", err)
		}
	}
}

func (d *decoder) groups(n *yaml.Node, path, org string) []group {
	items, ok := d.Sequence(n, path)
	if !ok {
		return nil
	}
	var gs []group
	machines := 0
	bad := false
	for i, it := range items {
		p := yamlfile.Index(path, i)
		_, m, _ := d.Mapping(it, p, groupKeys)
		if m == nil {
			bad = true
			continue
		}
		g := group{count: 1}
		if e, ok := m["count"]; ok {
			if c, ok := d.integer(e.V, yamlfile.Join(p, "count"), 0, maxMachines); ok {
				g.count = int(c)
			} else {
				bad = true
			}
		}
		eg, hasG := m["gflops"]
		em, hasM := m["mflops"]
		switch {
		case hasG && hasM:
			d.At(em.K, yamlfile.Join(p, "mflops"), "give gflops or mflops, not both")
			bad = true
		case hasG:
			if v, ok := d.milli(eg.V, yamlfile.Join(p, "gflops"), false, maxMFLOPS); ok {
				g.mflops = v
			} else {
				bad = true
			}
		case hasM:
			if v, ok := d.integer(em.V, yamlfile.Join(p, "mflops"), 1, maxMFLOPS); ok {
				g.mflops = v
			} else {
				bad = true
			}
		default:
			d.At(it, p, `missing required key "gflops" (or "mflops")`)
			bad = true
		}
		if v, ok := d.required(m, it, p, "watts"); ok {
			if w, ok := d.milli(v, yamlfile.Join(p, "watts"), false, maxMilliW); ok {
				g.busyMilliW = w
			} else {
				bad = true
			}
		} else {
			bad = true
		}
		if e, ok := m["idle_watts"]; ok {
			if w, ok := d.milli(e.V, yamlfile.Join(p, "idle_watts"), true, maxMilliW); ok {
				if g.busyMilliW > 0 && w > g.busyMilliW {
					d.At(e.V, yamlfile.Join(p, "idle_watts"), "must be <= watts (%s), got %s", ratString(big.NewRat(g.busyMilliW, 1000)), e.V.Value)
					bad = true
				}
				g.idleMilliW = w
			} else {
				bad = true
			}
		}
		if sh, ok := d.capacity(m, p); ok {
			g.shape = sh
		} else {
			bad = true
		}
		machines += g.count
		gs = append(gs, g)
	}
	if !bad && machines == 0 {
		d.At(n, path, "organisation %q has no machines (every organisation must contribute at least one)", org)
	}
	return gs
}

// types reads the task types. Sizes given in minutes are converted to MFlop
// on the reference machine, which needs the machines (machinesOK).
func (d *decoder) types(n *yaml.Node, s *Scenario, machinesOK bool) {
	items, ok := d.Sequence(n, "types")
	if !ok {
		return
	}
	seen := map[string]int{}
	for i, it := range items {
		p := yamlfile.Index("types", i)
		_, m, _ := d.Mapping(it, p, typeKeys)
		if m == nil {
			continue
		}
		t := taskType{}
		t.shape, _ = d.request(m, it, p)
		if v, ok := d.required(m, it, p, "name"); ok {
			if name, ok := d.name(v, yamlfile.Join(p, "name")); ok {
				if seen[name] > 0 {
					d.At(v, yamlfile.Join(p, "name"), "duplicate task type %q (first at line %d)", name, seen[name])
				} else {
					seen[name] = v.Line
				}
				t.name = name
			}
		}
		eg, hasG := m["gflop"]
		em, hasM := m["minutes"]
		eo, hasOn := m["on"]
		switch {
		case hasG && hasM:
			d.At(em.K, yamlfile.Join(p, "minutes"), "give gflop or minutes, not both")
		case hasG:
			if hasOn {
				d.At(eo.K, yamlfile.Join(p, "on"), "only meaningful with minutes")
			}
			lo, hi, ok := d.pair(eg.V, yamlfile.Join(p, "gflop"))
			if !ok {
				break
			}
			a, okA := d.milli(lo, yamlfile.Index(yamlfile.Join(p, "gflop"), 0), false, maxSizeMFlop)
			b, okB := d.milli(hi, yamlfile.Index(yamlfile.Join(p, "gflop"), 1), false, maxSizeMFlop)
			if okA && okB {
				t.min, t.max = d.ordered(eg.V, yamlfile.Join(p, "gflop"), a, b)
			}
		case hasM:
			ref, refOK := d.reference(eo, hasOn, yamlfile.Join(p, "on"), s, machinesOK)
			lo, hi, ok := d.pair(em.V, yamlfile.Join(p, "minutes"))
			if !ok {
				break
			}
			a, okA := d.minutes(lo, yamlfile.Index(yamlfile.Join(p, "minutes"), 0), ref, refOK)
			b, okB := d.minutes(hi, yamlfile.Index(yamlfile.Join(p, "minutes"), 1), ref, refOK)
			if okA && okB && refOK {
				t.min, t.max = d.ordered(em.V, yamlfile.Join(p, "minutes"), a, b)
			}
		default:
			d.At(it, p, `missing required key "gflop" (or "minutes")`)
		}
		s.types = append(s.types, t)
	}
}

// pair reads a [min, max] list.
func (d *decoder) pair(n *yaml.Node, path string) (*yaml.Node, *yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode || len(n.Content) != 2 {
		d.At(n, path, "must be a range [min, max], got %s", yamlfile.Describe(n))
		return nil, nil, false
	}
	return n.Content[0], n.Content[1], true
}

func (d *decoder) ordered(n *yaml.Node, path string, a, b int64) (int64, int64) {
	if a > b {
		d.At(n, path, "min is larger than max")
	}
	return a, b
}

// reference resolves `on` to MFLOPS as an exact rational.
func (d *decoder) reference(e yamlfile.Entry, has bool, path string, s *Scenario, machinesOK bool) (*big.Rat, bool) {
	which := "mean"
	if has {
		if isNumberTag(e.V) || nonFinite(e.V) {
			v, ok := d.milli(e.V, path, false, maxMFLOPS)
			if !ok {
				return nil, false
			}
			return big.NewRat(v, 1), true
		}
		t, ok := d.text(e.V, path)
		if !ok {
			return nil, false
		}
		if t != "mean" && t != "best" {
			d.At(e.V, path, `must be "mean", "best" or a number of GFLOPS, got %q`, t)
			return nil, false
		}
		which = t
	}
	if !machinesOK {
		return nil, false // the machines' own errors are already reported
	}
	var sum, n, best int64
	for _, o := range s.orgs {
		for _, g := range o.groups {
			if g.count == 0 {
				continue
			}
			sum += int64(g.count) * g.mflops
			n += int64(g.count)
			best = max(best, g.mflops)
		}
	}
	if n == 0 {
		return nil, false
	}
	if which == "best" {
		return big.NewRat(best, 1), true
	}
	return big.NewRat(sum, n), true
}

// minutes converts a run time on the reference machine to MFlop, rounded to
// the nearest MFlop.
func (d *decoder) minutes(n *yaml.Node, path string, ref *big.Rat, refOK bool) (int64, bool) {
	r, ok := d.number(n, path)
	if !ok || !d.sign(n, path, r, false) {
		return 0, false
	}
	if !refOK {
		return 0, true
	}
	v := new(big.Rat).Mul(r, ratSixty)
	v.Mul(v, ref)
	size, ok := roundRat(v)
	if !ok || size > maxSizeMFlop {
		d.At(n, path, "task size above %d GFlop", maxSizeMFlop/1000)
		return 0, false
	}
	if size == 0 {
		d.At(n, path, "task size rounds to 0 MFlop")
		return 0, false
	}
	return size, true
}

// mixes reads each organisation's task counts per type.
func (d *decoder) mixes(orgsNode *yaml.Node, s *Scenario) {
	typeNames := make([]string, len(s.types))
	for i, t := range s.types {
		typeNames[i] = t.name
	}
	total := 0
	for i, it := range orgsNode.Content {
		if i >= len(s.orgs) || it.Kind != yaml.MappingNode {
			continue
		}
		o := &s.orgs[i]
		o.mix = make([]int, len(s.types))
		var mixNode *yaml.Node
		for j := 0; j+1 < len(it.Content); j += 2 {
			if it.Content[j].Value == "mix" {
				mixNode = it.Content[j+1]
				break
			}
		}
		if mixNode == nil {
			continue
		}
		p := yamlfile.Join(yamlfile.Index("orgs", i), "mix")
		list, _, _ := d.Mapping(mixNode, p, nil)
		for _, e := range list {
			ti := slices.Index(typeNames, e.Key)
			if ti < 0 {
				if len(typeNames) == 0 {
					d.At(e.K, yamlfile.Join(p, e.Key), "unknown task type %q (the scenario declares no types)", e.Key)
				} else {
					d.At(e.K, yamlfile.Join(p, e.Key), "unknown task type %q (have %s)", e.Key, strings.Join(typeNames, ", "))
				}
				continue
			}
			c, ok := d.integer(e.V, yamlfile.Join(p, e.Key), 0, maxTasks)
			if !ok {
				continue
			}
			o.mix[ti] = int(c)
			total += int(c)
		}
	}
	if total > maxTasks {
		d.At(orgsNode, "orgs", "%d generated tasks in all, more than %d", total, maxTasks)
	}
}

// generatedID is the id of the n-th (1-based) generated task of an
// organisation.
func generatedID(org string, n int) string { return org + "-" + strconv.Itoa(n) }

func (d *decoder) tasks(n *yaml.Node, s *Scenario) {
	items, ok := d.Sequence(n, "tasks")
	if !ok {
		return
	}
	names := s.OrgNames()
	generated := make(map[string]int, len(s.orgs)) // org -> generated count
	total := len(items)
	for _, o := range s.orgs {
		for _, c := range o.mix {
			generated[o.name] += c
			total += c
		}
	}
	if total > maxTasks {
		d.At(n, "tasks", "%d tasks in all (generated and explicit), more than %d", total, maxTasks)
		return
	}
	seen := map[string]int{}
	for i, it := range items {
		p := yamlfile.Index("tasks", i)
		_, m, _ := d.Mapping(it, p, taskKeys)
		if m == nil {
			continue
		}
		t := explicitTask{org: -1}
		t.shape, _ = d.request(m, it, p)
		if v, ok := d.required(m, it, p, "id"); ok {
			if id, ok := d.name(v, yamlfile.Join(p, "id")); ok {
				switch {
				case seen[id] > 0:
					d.At(v, yamlfile.Join(p, "id"), "duplicate task id %q (first at line %d)", id, seen[id])
				case collidesWithGenerated(id, generated):
					d.At(v, yamlfile.Join(p, "id"), "task id %q is also the id of a generated task (ORG-N); pick another", id)
				default:
					seen[id] = v.Line
				}
				t.id = id
			}
		}
		if v, ok := d.required(m, it, p, "org"); ok {
			if org, ok := d.name(v, yamlfile.Join(p, "org")); ok {
				t.org = slices.Index(names, org)
				if t.org < 0 {
					d.At(v, yamlfile.Join(p, "org"), "unknown organisation %q (have %s)", org, strings.Join(names, ", "))
				}
			}
		}
		if v, ok := d.required(m, it, p, "gflop"); ok {
			if size, ok := d.milli(v, yamlfile.Join(p, "gflop"), false, maxSizeMFlop); ok {
				t.size = size
			}
		}
		if e, ok := m["submit"]; ok {
			if v, ok := d.seconds(e.V, yamlfile.Join(p, "submit"), false); ok {
				t.submit = v
			}
		}
		s.explicit = append(s.explicit, t)
	}
}

// collidesWithGenerated says whether id has the form ORG-N of a generated
// task: ORG an organisation with generated tasks, N in 1..count. Ids map to
// (org, N) one to one, since N has no '-'.
func collidesWithGenerated(id string, generated map[string]int) bool {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return false
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n < 1 || strconv.Itoa(n) != id[i+1:] {
		return false
	}
	return n <= generated[id[:i]]
}

// engineNode is the value of sim.engine, or nil.
func engineNode(top map[string]yamlfile.Entry) *yaml.Node {
	e, ok := top["sim"]
	if !ok || e.V.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(e.V.Content); i += 2 {
		if e.V.Content[i].Value == "engine" {
			return e.V.Content[i+1]
		}
	}
	return nil
}

// Engines are the simulator engines a scenario may name in `sim.engine`.
var Engines = []string{"default", "ispd"}

// Options choose, for one run, who is late and which limits apply. The
// zero value runs the scenario as written.
type Options struct {
	// Late names the organisation that submits late ("" = the scenario's
	// late.org, "none" = nobody).
	Late string
	// LateLimit is the late organisation's limit ("" = as in the scenario);
	// AllLimit is every organisation's ("" = as in the scenario), the late
	// one's too unless LateLimit is set. Syntax as in the file: "80%",
	// "4000W", "system".
	LateLimit, AllLimit string
	// LateDelaySeconds overrides the scenario's late.delay.
	LateDelaySeconds *float64
	// ISPDWorkload draws the generated tasks as the author's iSPD workload
	// generator does (gspd-unesp/ispd 196cdf6, CargaForNode.java L121-126):
	// the size from twoStageUniform(min, min+(max−min)/2, max, 1), which with
	// probability 1 is uniform on the lower half of the range
	// (Distribution.java L91-104), and the submit time the organisation's
	// delay plus an exponential draw of mean 5 s (nextExponential(5),
	// Distribution.java L73-78), independently per task.
	ISPDWorkload bool
}

// Instance resolves the scenario for one run: limits in milliwatts, the late
// organisation's delay, and task sizes drawn from seed. Tasks come sorted by
// submit time; ties keep a stable order (generated tasks by organisation in
// file order, then by type in file order; then explicit tasks in file
// order). Generated ids are ORG-N, N counting each organisation's generated
// tasks from 1 in that order.
func (s *Scenario) Instance(opts Options, seed uint64) (*Instance, error) {
	if len(s.orgs) == 0 {
		return nil, fmt.Errorf("%s: scenario has no organisations", s.File)
	}
	late := -1
	lateName := opts.Late
	if lateName == "" {
		lateName = s.LateOrg
	}
	if lateName != "" && !strings.EqualFold(lateName, noneOrg) {
		late = slices.Index(s.OrgNames(), lateName)
		if late < 0 {
			return nil, fmt.Errorf("%s: late organisation %q: no such organisation (have %s)", s.File, lateName, strings.Join(s.OrgNames(), ", "))
		}
	}
	lateDelay := s.LateDelaySeconds
	if opts.LateDelaySeconds != nil {
		v := *opts.LateDelaySeconds
		if math.IsNaN(v) || v < 0 || v > maxSeconds {
			return nil, fmt.Errorf("%s: late delay %v s: must be between 0 and %g", s.File, v, float64(maxSeconds))
		}
		if late < 0 {
			return nil, fmt.Errorf("%s: a late delay needs a late organisation", s.File)
		}
		lateDelay = v
	}
	var allLim, lateLim *limit
	if opts.AllLimit != "" {
		l, err := parseLimit(opts.AllLimit)
		if err != nil {
			return nil, fmt.Errorf("%s: limit for all organisations: %w", s.File, err)
		}
		allLim = &l
	}
	if opts.LateLimit != "" {
		l, err := parseLimit(opts.LateLimit)
		if err != nil {
			return nil, fmt.Errorf("%s: limit for the late organisation: %w", s.File, err)
		}
		if late < 0 {
			return nil, fmt.Errorf("%s: a limit for the late organisation needs a late organisation", s.File)
		}
		lateLim = &l
	}

	in := &Instance{Name: s.Name, Orgs: make([]policy.Org, len(s.orgs))}
	powerQuota := make([]int64, len(s.orgs))
	var system int64
	for i, o := range s.orgs {
		k := 0
		for _, g := range o.groups {
			for range g.count {
				k++
				in.Machines = append(in.Machines, g.policyMachine(o.name+"-m"+strconv.Itoa(k), i))
				in.IdleMilliW = append(in.IdleMilliW, g.idleMilliW)
			}
			powerQuota[i] += int64(g.count) * g.busyMilliW
		}
		system += powerQuota[i]
	}
	for i, o := range s.orgs {
		l := o.limit
		if allLim != nil {
			l = *allLim
		}
		if i == late && lateLim != nil {
			l = *lateLim
		}
		mw, err := l.resolve(powerQuota[i], system)
		if err != nil {
			return nil, fmt.Errorf("%s: organisation %s: limit %s: %w", s.File, o.name, l, err)
		}
		in.Orgs[i] = policy.Org{Name: o.name, LimitMilliW: mw}
	}

	delay := func(org int) float64 {
		if org == late {
			return lateDelay
		}
		return s.orgs[org].delay
	}
	n := len(s.explicit)
	for _, o := range s.orgs {
		for _, c := range o.mix {
			n += c
		}
	}
	in.Tasks = make([]TaskSpec, 0, n)
	for i, o := range s.orgs {
		k := 0
		for ti, t := range s.types {
			if ti >= len(o.mix) || o.mix[ti] == 0 {
				continue
			}
			// One stream per (organisation, type): editing one
			// organisation's mix leaves every other's sizes unchanged.
			rng := rand.New(rand.NewPCG(seed, stream(o.name, t.name)))
			span := uint64(t.max-t.min) + 1
			var arrivals *rand.Rand
			if opts.ISPDWorkload {
				span = uint64(t.max-t.min)/2 + 1
				arrivals = rand.New(rand.NewPCG(seed, ^stream(o.name, t.name)))
			}
			for range o.mix[ti] {
				k++
				submit := delay(i)
				if arrivals != nil {
					submit += ispdMeanArrivalSeconds * arrivals.ExpFloat64()
				}
				in.Tasks = append(in.Tasks, TaskSpec{
					ID:            generatedID(o.name, k),
					Org:           i,
					SizeMFlop:     t.min + int64(rng.Uint64N(span)),
					SubmitSeconds: submit,
					Request:       t.shape.request,
					Requirements:  t.shape.requirements,
					Executable:    t.shape.executable,
				})
			}
		}
	}
	for _, t := range s.explicit {
		in.Tasks = append(in.Tasks, TaskSpec{ID: t.id, Org: t.org, SizeMFlop: t.size, SubmitSeconds: delay(t.org) + t.submit,
			Request: t.shape.request, Requirements: t.shape.requirements, Executable: t.shape.executable})
	}
	slices.SortStableFunc(in.Tasks, func(a, b TaskSpec) int { return cmp.Compare(a.SubmitSeconds, b.SubmitSeconds) })
	return in, nil
}

// ispdMeanArrivalSeconds is the mean of the author's per-task arrival draw,
// nextExponential(5) (CargaForNode.java L124).
const ispdMeanArrivalSeconds = 5

// stream derives the PCG stream of one (organisation, task type).
func stream(org, typ string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(org))
	h.Write([]byte{0})
	h.Write([]byte(typ))
	return h.Sum64()
}
