package jobfile

import (
	"errors"
	"fmt"
	"math/big"
	"path"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// Shape limits. They mirror the ledger's (ledger/command.go) and the
// executor's, so that a job accepted here is not rejected when it is
// submitted or run; jobfile_test checks them against the ledger.
const (
	maxArgs        = 256               // ledger.MaxArgv
	maxArgBytes    = 4096              // ledger.MaxArgBytes: each argument, each env value
	maxEnv         = 256               // ledger.MaxEnv
	maxEnvKeyLen   = 128               // ledger.MaxEnvKeyLen
	maxFiles       = 256               // ledger.MaxFiles: inputs, and outputs, per task
	maxPathLen     = 255               // ledger.MaxFileNameLen
	maxSizeMFlop   = 1 << 53           // ledger.MaxSizeMFlop
	maxRefMFLOPS   = 1_000_000_000_000 // ledger.MaxMFLOPS: 10^9 GFLOPS
	maxArgEnvBytes = 1 << 20           // the executor's bound on argv + environment
	maxParams      = 64
	maxRuntime     = 3650 * 24 * time.Hour
)

var (
	taskKeys     = []string{"name", "argv", "env", "size", "runtime", "reference_gflops", "wall_clock_limit", "inputs", "outputs", "checkpointable", "cpus", "memory", "gpus", "requirements", "max_attempts", "retries", "nodes", "class", "deadline", "on_miss", "alternatives"}
	defaultsKeys = taskKeys[1:]
	templateKeys = append(slices.Clone(taskKeys), "count", "params")
	topKeys      = []string{"version", "name", "defaults", "tasks", "template"}
	inputKeys    = []string{"path", "name"}
)

// --- value checks, applied to a string once its placeholders are
// substituted (at parse time when it has none). Each returns the value to
// use (cleaned, for paths) or an error that quotes the value.

func checkArg(s string) (string, error) {
	if len(s) > maxArgBytes {
		return "", fmt.Errorf("%d bytes long, more than %d", len(s), maxArgBytes)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", errors.New("contains a NUL byte")
	}
	return s, nil
}

func checkCommand(s string) (string, error) {
	if s == "" {
		return "", errors.New("the command (argv[0]) must not be empty")
	}
	return checkArg(s)
}

func checkTaskName(s string) (string, error) {
	if !validName(s) {
		return "", fmt.Errorf("task name %q: want 1-%d letters, digits, '_', '.' or '-', starting with a letter or digit", s, maxNameLen)
	}
	return s, nil
}

// cleanRel checks a slash-separated relative path and returns it cleaned.
// where says which directory it must stay in.
func cleanRel(s, where string) (string, error) {
	if s == "" {
		return "", errors.New("empty path")
	}
	if len(s) > maxPathLen {
		return "", fmt.Errorf("path of %d bytes, more than %d", len(s), maxPathLen)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%q contains a control character", s)
		}
	}
	if strings.HasPrefix(s, "/") {
		return "", fmt.Errorf("%q is an absolute path: paths are relative to %s", s, where)
	}
	c := path.Clean(s)
	if c == "." {
		return "", fmt.Errorf("%q names %s itself, not a file in it", s, where)
	}
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q goes outside %s", s, where)
	}
	return c, nil
}

const (
	workDir = "the task's working directory"
	jobDir  = "the job file's directory"
)

func checkOutput(s string) (string, error) {
	c, err := cleanRel(s, workDir)
	if err != nil {
		return "", err
	}
	if _, err := path.Match(c, ""); err != nil {
		return "", fmt.Errorf("%q is not a valid glob pattern (path.Match syntax: *, ?, [a-z], \\)", s)
	}
	return c, nil
}

func checkInputPath(s string) (string, error) { return cleanRel(s, jobDir) }
func checkInputName(s string) (string, error) { return cleanRel(s, workDir) }

// validEnvKey is the ledger's rule for variable names.
func validEnvKey(k string) bool {
	if k == "" || len(k) > maxEnvKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}

// reservedEnv: the executor sets these itself.
func reservedEnv(k string) bool {
	return k == "CHECKPOINT_DIR" || strings.HasPrefix(k, "COOPGRID_")
}

// --- one mapping of task fields: a task of the list, the template, or
// the defaults. A nil field was not given.

type fields struct {
	node *yaml.Node
	path string
	// invalid holds the keys given with a wrong value (already reported),
	// so that they are not reported missing as well.
	invalid map[string]bool
	name    *tmpl
	argv    *tmplList
	env     *envSpec
	work    *work
	ref     *ref
	wall    *wall
	inputs  *inputList
	outputs *tmplList
	ckpt    *bool
	req     *request
	dl      *deadlineFields
	alts    *altList // alternatives.go
}

type tmplList struct {
	node  *yaml.Node
	items []*tmpl
}

type envVar struct {
	key string
	val *tmpl
}

type envSpec struct {
	node *yaml.Node
	path string
	vars []envVar
}

// work is the size estimate given in one mapping: size, or runtime (then
// converted with reference_gflops, which may come from elsewhere).
type work struct {
	node      *yaml.Node
	path      string
	sizeMFlop int64
	runtime   time.Duration // > 0 when given as runtime
}

type ref struct {
	node   *yaml.Node
	mflops int64
}

type wall struct {
	node *yaml.Node
	d    time.Duration
}

type inputSpec struct {
	node *yaml.Node
	path string
	src  *tmpl
	name *tmpl // nil: the base name of src
}

type inputList struct {
	node  *yaml.Node
	path  string
	items []inputSpec
}

// taskFields reads the task keys of mapping m (already checked against the
// allowed keys by the caller).
func (d *decoder) taskFields(n *yaml.Node, p string, m map[string]yamlfile.Entry, sc *scope) *fields {
	f := &fields{node: n, path: p, invalid: map[string]bool{}}
	for _, e := range yamlfile.InOrder(n, m) {
		before := d.Count()
		kp := yamlfile.Join(p, e.Key)
		switch e.Key {
		case "name":
			f.name, _ = d.tmplChecked(e.V, kp, sc, checkTaskName)
		case "argv":
			f.argv = d.argv(e.V, kp, sc)
		case "env":
			f.env = d.env(e.V, kp, sc)
		case "size":
			if v, ok := d.milli(e.V, kp, "GFlop", maxSizeMFlop); ok {
				f.work = &work{node: e.V, path: kp, sizeMFlop: v}
			}
		case "runtime":
			if v, ok := d.duration(e.V, kp, maxRuntime); ok {
				f.work = &work{node: e.V, path: kp, runtime: v}
			}
		case "reference_gflops":
			if v, ok := d.milli(e.V, kp, "GFLOPS", maxRefMFLOPS); ok {
				f.ref = &ref{node: e.V, mflops: v}
			}
		case "wall_clock_limit":
			if v, ok := d.duration(e.V, kp, d.opts.MaxWallClock); ok {
				f.wall = &wall{node: e.V, d: v}
			}
		case "inputs":
			f.inputs = d.inputs(e.V, kp, sc)
		case "outputs":
			f.outputs = d.tmplList(e.V, kp, sc, "output patterns", checkOutput)
		case "checkpointable":
			if v, ok := d.boolean(e.V, kp); ok {
				f.ckpt = &v
			}
		case "cpus", "memory", "gpus", "requirements", "max_attempts", "retries", "nodes":
			d.requestField(f, e.Key, e.V, kp)
		case "class", "deadline", "on_miss":
			d.deadlineField(f, e.Key, e.V, kp)
		case "alternatives":
			f.alts = d.alternatives(e.V, kp)
		}
		if d.Count() > before {
			f.invalid[e.Key] = true
		}
	}
	if s, ok := m["size"]; ok {
		if r, ok := m["runtime"]; ok {
			first, second := s, r
			if r.K.Line < s.K.Line || (r.K.Line == s.K.Line && r.K.Column < s.K.Column) {
				first, second = r, s
			}
			d.At(second.K, yamlfile.Join(p, second.Key), "give either size or runtime, not both (%s is at line %d)", first.Key, first.K.Line)
			f.work = nil
			f.invalid["size"], f.invalid["runtime"] = true, true
		}
	}
	return f
}

// tmplChecked reads a string with placeholders; when it has none it is
// checked (and cleaned) now, so that the mistake is reported even if other
// errors stop the expansion.
func (d *decoder) tmplChecked(n *yaml.Node, p string, sc *scope, check func(string) (string, error)) (*tmpl, bool) {
	t, ok := d.tmplAt(n, p, sc)
	if !ok {
		return nil, false
	}
	if t.static() {
		v, err := check(t.raw)
		if err != nil {
			d.At(n, p, "%v", err)
			return nil, false
		}
		t.raw = v
	}
	return t, true
}

func (d *decoder) tmplList(n *yaml.Node, p string, sc *scope, what string, check func(string) (string, error)) *tmplList {
	items, ok := d.Sequence(n, p)
	if !ok {
		return nil
	}
	if len(items) > maxFiles {
		d.At(n, p, "%d %s, more than %d", len(items), what, maxFiles)
		return nil
	}
	l := &tmplList{node: n}
	good := true
	for i, it := range items {
		t, ok := d.tmplChecked(it, yamlfile.Index(p, i), sc, check)
		good = good && ok
		l.items = append(l.items, t)
	}
	if !good {
		return nil
	}
	return l
}

func (d *decoder) argv(n *yaml.Node, p string, sc *scope) *tmplList {
	items, ok := d.Sequence(n, p)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		d.At(n, p, "must not be empty: give the command and its arguments, e.g. [/bin/sh, run.sh]")
		return nil
	}
	if len(items) > maxArgs {
		d.At(n, p, "%d arguments, more than %d", len(items), maxArgs)
		return nil
	}
	l := &tmplList{node: n}
	good := true
	for i, it := range items {
		check := checkArg
		if i == 0 {
			check = checkCommand
		}
		t, ok := d.tmplChecked(it, yamlfile.Index(p, i), sc, check)
		good = good && ok
		l.items = append(l.items, t)
	}
	if !good {
		return nil
	}
	return l
}

func (d *decoder) env(n *yaml.Node, p string, sc *scope) *envSpec {
	_, m, ok := d.Mapping(n, p, nil)
	if !ok {
		return nil
	}
	if len(m) > maxEnv {
		d.At(n, p, "%d variables, more than %d", len(m), maxEnv)
		return nil
	}
	e := &envSpec{node: n, path: p}
	good := len(m)*2 == len(n.Content) // no key was rejected by mapping
	for _, kv := range yamlfile.InOrder(n, m) {
		kp := yamlfile.Join(p, kv.Key)
		switch {
		case !validEnvKey(kv.Key):
			d.At(kv.K, kp, "variable name %q: want a letter or '_' then letters, digits or '_', at most %d characters", kv.Key, maxEnvKeyLen)
			good = false
			continue
		case reservedEnv(kv.Key):
			d.At(kv.K, kp, "%s is set by the executor; CHECKPOINT_DIR and COOPGRID_* are reserved", kv.Key)
			good = false
			continue
		}
		t, ok := d.tmplChecked(kv.V, kp, sc, checkArg)
		if !ok {
			good = false
			continue
		}
		e.vars = append(e.vars, envVar{key: kv.Key, val: t})
	}
	if !good {
		return nil
	}
	return e
}

func (d *decoder) inputs(n *yaml.Node, p string, sc *scope) *inputList {
	items, ok := d.Sequence(n, p)
	if !ok {
		return nil
	}
	if len(items) > maxFiles {
		d.At(n, p, "%d input files, more than %d", len(items), maxFiles)
		return nil
	}
	l := &inputList{node: n, path: p}
	good := true
	for i, it := range items {
		ip := yamlfile.Index(p, i)
		in := inputSpec{node: it, path: ip}
		if it.Kind == yaml.MappingNode {
			_, m, _ := d.Mapping(it, ip, inputKeys)
			if len(m)*2 != len(it.Content) {
				good = false
				continue
			}
			e, ok := m["path"]
			if !ok {
				d.At(it, ip, "missing path (the file to ship, relative to the job file)")
				good = false
				continue
			}
			if in.src, ok = d.tmplChecked(e.V, yamlfile.Join(ip, "path"), sc, checkInputPath); !ok {
				good = false
			}
			if e, ok := m["name"]; ok {
				if in.name, ok = d.tmplChecked(e.V, yamlfile.Join(ip, "name"), sc, checkInputName); !ok {
					good = false
				}
			}
		} else {
			if !d.Scalar(it, ip, `a path, or a mapping {path: ..., name: ...}`) {
				good = false
				continue
			}
			if in.src, ok = d.tmplChecked(it, ip, sc, checkInputPath); !ok {
				good = false
			}
		}
		l.items = append(l.items, in)
	}
	if !good {
		return nil
	}
	return l
}

// --- a plan: a task's fields with the defaults applied, ready to be
// expanded once per index.

type plan struct {
	node *yaml.Node
	path string
	// template: the plan is expanded for many indices, and errors found
	// while expanding name the index.
	template  bool
	name      *tmpl // nil: "task-<index>"
	argv      []*tmpl
	env       []envVar
	sizeMFlop int64
	wall      time.Duration
	inputs    *inputList
	outputs   []*tmpl
	ckpt      bool
	cpus      int64
	memory    int64
	gpus      int64
	reqs      []Requirement
	// maxAttempts and retries: 0 when not given.
	maxAttempts, retries int
	// nodes: 0 when not given.
	nodes int
	// class, deadline and onMiss: zero when not given (deadline.go).
	class    string
	deadline Deadline
	onMiss   string
	// alts: the resolved alternatives (alternatives.go), nil when none;
	// altsNode and altsPath locate them for errors.
	alts     []Alternative
	altsNode *yaml.Node
	altsPath string
}

// plan merges a task's fields with the defaults: a task's value replaces
// the default, except env, where the task's variables are added to the
// defaults' (and win on the same name). size and runtime are one choice:
// a task that gives either ignores both defaults.
func (d *decoder) plan(t, defs *fields, template bool) (*plan, bool) {
	p := &plan{node: t.node, path: t.path, template: template, name: t.name}
	ok := true
	missing := func(key, what string) {
		ok = false
		if t.invalid[key] || defs.invalid[key] {
			return
		}
		d.At(t.node, t.path, "missing %s (set it here or in defaults)", what)
	}
	switch {
	case t.argv != nil:
		p.argv = t.argv.items
	case defs.argv != nil:
		p.argv = defs.argv.items
	default:
		missing("argv", "argv (the command and its arguments)")
	}

	if t.invalid["env"] || defs.invalid["env"] {
		ok = false
	}
	for _, e := range []*envSpec{defs.env, t.env} {
		if e == nil {
			continue
		}
		for _, v := range e.vars {
			if i := slices.IndexFunc(p.env, func(x envVar) bool { return x.key == v.key }); i >= 0 {
				p.env[i] = v
			} else {
				p.env = append(p.env, v)
			}
		}
	}
	if len(p.env) > maxEnv {
		d.At(t.node, t.path, "%d environment variables with the defaults', more than %d", len(p.env), maxEnv)
		ok = false
	}

	w, wFromDefs := t.work, false
	if w == nil && !t.invalid["size"] && !t.invalid["runtime"] {
		w, wFromDefs = defs.work, true
	}
	switch {
	case w == nil:
		ok = false
		if !t.invalid["size"] && !t.invalid["runtime"] && !defs.invalid["size"] && !defs.invalid["runtime"] {
			d.At(t.node, t.path, "missing size (in GFlop) or runtime (with reference_gflops) (set it here or in defaults)")
		}
	case w.runtime > 0:
		r := t.ref
		if r == nil && !t.invalid["reference_gflops"] {
			r = defs.ref
		}
		if r == nil {
			ok = false
			if !t.invalid["reference_gflops"] && !defs.invalid["reference_gflops"] {
				d.report(w.node, w.path, wFromDefs, "runtime needs reference_gflops: the speed, in GFLOPS, of the machine the runtime was measured on (set it here or in defaults)")
			}
			break
		}
		size, err := runtimeMFlop(w.runtime, r.mflops)
		if err != nil {
			ok = false
			d.report(w.node, w.path, wFromDefs, "%v", err)
			break
		}
		p.sizeMFlop = size
	default:
		p.sizeMFlop = w.sizeMFlop
	}

	switch {
	case t.wall != nil:
		p.wall = t.wall.d
	case defs.wall != nil && !t.invalid["wall_clock_limit"]:
		p.wall = defs.wall.d
	default:
		// A moldable task may give a limit per alternative instead.
		if l, inv := altsOf(t, defs); l == nil {
			if inv {
				ok = false
			} else {
				missing("wall_clock_limit", `wall_clock_limit (the longest one run may take, e.g. "2h")`)
			}
		}
	}

	switch {
	case t.invalid["inputs"] || (t.inputs == nil && defs.invalid["inputs"]):
		ok = false
	case t.inputs != nil:
		p.inputs = t.inputs
	default:
		p.inputs = defs.inputs
	}
	if p.inputs != nil && len(p.inputs.items) == 0 {
		p.inputs = nil
	}
	switch {
	case t.invalid["outputs"] || (t.outputs == nil && defs.invalid["outputs"]):
		ok = false
	case t.outputs != nil:
		p.outputs = t.outputs.items
	case defs.outputs != nil:
		p.outputs = defs.outputs.items
	}
	switch {
	case t.ckpt != nil:
		p.ckpt = *t.ckpt
	case defs.ckpt != nil:
		p.ckpt = *defs.ckpt
	}
	if t.invalid["checkpointable"] || defs.invalid["checkpointable"] || t.invalid["name"] || t.invalid["argv"] || defs.invalid["argv"] {
		ok = false
	}
	for _, k := range []string{"cpus", "memory", "gpus", "requirements", "max_attempts", "retries", "nodes"} {
		if t.invalid[k] || defs.invalid[k] {
			ok = false
		}
	}
	p.cpus, p.memory, p.gpus, p.reqs = mergeRequest(t.req, defs.req)
	p.maxAttempts, p.retries = mergeRetry(t.req, defs.req)
	p.nodes = mergeNodes(t.req, defs.req)
	if !d.mergeDeadline(p, t, defs) {
		ok = false
	}
	if ok && !d.mergeAlternatives(p, t, defs) {
		ok = false
	}
	return p, ok
}

// report is errAt for a node of the task itself and once for a node of the
// defaults, which every task of a list shares.
func (d *decoder) report(n *yaml.Node, p string, shared bool, format string, args ...any) {
	if shared {
		d.Once(n, p, nil, format, args...)
		return
	}
	d.At(n, p, format, args...)
}

// runtimeMFlop converts a runtime on a machine of mflops MFLOPS into MFlop,
// rounding to the nearest MFlop (halves up), exactly.
func runtimeMFlop(runtime time.Duration, mflops int64) (int64, error) {
	// runtime[ns] · mflops / 1e9, in integers: up to 3.2e17 ns × 1e12
	// overflows int64, hence big.Int.
	num := new(big.Int).Mul(big.NewInt(int64(runtime)), big.NewInt(mflops))
	num.Mul(num, big.NewInt(2))
	num.Add(num, big.NewInt(1e9))
	q := num.Div(num, big.NewInt(2e9))
	switch {
	case q.Sign() <= 0:
		return 0, fmt.Errorf("runtime %s at %s GFLOPS is less than 1 MFlop of work", runtime, ratString(big.NewRat(mflops, 1000)))
	case !q.IsInt64() || q.Int64() > maxSizeMFlop:
		return 0, fmt.Errorf("runtime %s at %s GFLOPS is more than %s GFlop of work", runtime, ratString(big.NewRat(mflops, 1000)), ratString(big.NewRat(maxSizeMFlop, 1000)))
	}
	return q.Int64(), nil
}
