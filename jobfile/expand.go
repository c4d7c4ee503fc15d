package jobfile

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// job reads the top level, checks every field, then expands the tasks.
// Expansion only starts when the file has no error: it may repeat a
// template many times, and its errors would only echo the earlier ones.
func (d *decoder) job(root *yaml.Node, filename string) *Job {
	_, top, ok := d.Mapping(root, "", topKeys)
	if !ok {
		return nil
	}
	job := &Job{Name: defaultJobName(filename)}
	if e, ok := top["version"]; ok {
		if v, ok := d.integer(e.V, "version", 0, 1<<31); ok && v != 1 {
			d.At(e.V, "version", "unsupported version %d: this peer reads job files of version 1", v)
		}
	}
	if e, ok := top["name"]; ok {
		if s, ok := d.text(e.V, "name"); ok {
			if validName(s) {
				job.Name = s
			} else {
				d.At(e.V, "name", "job name %q: want 1-%d letters, digits, '_', '.' or '-', starting with a letter or digit", s, maxNameLen)
			}
		}
	}
	tasksE, hasTasks := top["tasks"]
	tmplE, hasTmpl := top["template"]
	switch {
	case !hasTasks && !hasTmpl:
		d.At(root, "", "missing tasks (a list of tasks) or template (one task repeated with {{index}})")
		return nil
	case hasTasks && hasTmpl:
		d.At(tmplE.K, "template", "give either tasks or template, not both (tasks is at line %d)", tasksE.K.Line)
		return nil
	}

	// The template's parameters come first: defaults may use them too.
	listScope := &scope{}
	sc := listScope
	var sw *sweep
	var tmplMap map[string]yamlfile.Entry
	if hasTmpl {
		_, tmplMap, ok = d.Mapping(tmplE.V, "template", templateKeys)
		if !ok {
			return nil
		}
		sw = d.sweep(tmplE.V, tmplMap)
		sc = &scope{template: true, params: map[string]int{}}
		if sw == nil || sw.total == 0 {
			// params is broken (and reported): do not also report every
			// placeholder that names a parameter.
			sc.lenient = true
		}
		if sw != nil {
			for i, name := range sw.names {
				sc.params[name] = i
			}
		}
	}
	defs := &fields{invalid: map[string]bool{}}
	if e, ok := top["defaults"]; ok {
		if _, m, ok := d.Mapping(e.V, "defaults", defaultsKeys); ok {
			defs = d.taskFields(e.V, "defaults", m, sc)
		} else {
			return nil
		}
	}

	var plans []*plan
	count := 0
	if hasTmpl {
		tf := d.taskFields(tmplE.V, "template", tmplMap, sc)
		p, ok := d.plan(tf, defs, true)
		if ok && sw != nil {
			plans, count = []*plan{p}, sw.total
		}
	} else {
		items, ok := d.Sequence(tasksE.V, "tasks")
		if !ok {
			return nil
		}
		switch {
		case len(items) == 0:
			d.At(tasksE.V, "tasks", "must not be empty")
			return nil
		case len(items) > d.opts.MaxTasks:
			d.At(tasksE.V, "tasks", "%d tasks, more than the %d allowed in one job", len(items), d.opts.MaxTasks)
			return nil
		}
		count = len(items)
		for i, it := range items {
			ip := yamlfile.Index("tasks", i)
			_, m, ok := d.Mapping(it, ip, taskKeys)
			if !ok {
				continue
			}
			p, ok := d.plan(d.taskFields(it, ip, m, listScope), defs, false)
			if ok {
				plans = append(plans, p)
			}
		}
	}
	if d.Count() > 0 {
		return nil
	}
	job.Tasks = d.expand(root, plans, sw, count)
	d.checkMoldableCount(plans, job.Tasks)
	if d.Count() > 0 {
		return nil
	}
	return job
}

// sweep is a template's repetition: count copies of every combination of
// the parameters' values.
type sweep struct {
	count  int
	names  []string
	values [][]string
	total  int
}

// sweep reads template.count and template.params. When they are wrong it
// reports why and returns a sweep of no task (nil when params is not even a
// mapping), still carrying the parameter names it could read so that the
// placeholders using them are not reported as well.
func (d *decoder) sweep(n *yaml.Node, m map[string]yamlfile.Entry) *sweep {
	sw := &sweep{count: 1}
	good := true
	ce, hasCount := m["count"]
	if hasCount {
		v, ok := d.integer(ce.V, "template.count", 1, int64(d.opts.MaxTasks))
		if ok {
			sw.count = int(v)
		}
		good = good && ok
	}
	pe, hasParams := m["params"]
	if !hasCount && !hasParams {
		d.At(n, "template", "missing count (how many tasks) or params (the values to sweep over)")
		return nil
	}
	if hasParams {
		_, pm, ok := d.Mapping(pe.V, "template.params", nil)
		if !ok {
			return nil
		}
		keys := yamlfile.InOrder(pe.V, pm)
		if len(keys) == 0 {
			d.At(pe.V, "template.params", "must name at least one parameter")
			good = false
		}
		if len(keys) > maxParams {
			d.At(pe.V, "template.params", "%d parameters, more than %d", len(keys), maxParams)
			return nil
		}
		good = good && len(keys)*2 == len(pe.V.Content)
		for _, kv := range keys {
			kp := yamlfile.Join("template.params", kv.Key)
			if !validEnvKey(kv.Key) || len(kv.Key) > maxNameLen {
				d.At(kv.K, kp, "parameter name %q: want a letter or '_' then letters, digits or '_', at most %d characters", kv.Key, maxNameLen)
				good = false
				continue
			}
			sw.names = append(sw.names, kv.Key)
			items, ok := d.Sequence(kv.V, kp)
			if !ok {
				sw.values = append(sw.values, nil)
				good = false
				continue
			}
			switch {
			case len(items) == 0:
				d.At(kv.V, kp, "must list at least one value")
				good = false
			case len(items) > d.opts.MaxTasks:
				d.At(kv.V, kp, "%d values, more than the %d tasks allowed in one job", len(items), d.opts.MaxTasks)
				good = false
				items = nil
			}
			vals := make([]string, 0, len(items))
			for i, it := range items {
				s, ok := d.text(it, yamlfile.Index(kp, i))
				if ok {
					if _, err := checkArg(s); err != nil {
						d.At(it, yamlfile.Index(kp, i), "%v", err)
						ok = false
					}
				}
				good = good && ok
				vals = append(vals, s)
			}
			sw.values = append(sw.values, vals)
		}
	}
	if !good {
		// Keep the names for the scope (placeholders are checked against
		// them) but expand nothing.
		return &sweep{names: sw.names}
	}
	total := sw.count
	for i, vals := range sw.values {
		if total > d.opts.MaxTasks/len(vals) {
			d.At(n, "template", "count × params: more than the %d tasks allowed in one job (at parameter %s)", d.opts.MaxTasks, sw.names[i])
			return &sweep{names: sw.names}
		}
		total *= len(vals)
	}
	if total > d.opts.MaxTasks {
		d.At(n, "template", "%d tasks, more than the %d allowed in one job", total, d.opts.MaxTasks)
		return &sweep{names: sw.names}
	}
	sw.total = total
	return sw
}

// vars returns the placeholders' values of task i of the sweep: the
// parameters vary like nested loops in the order they are written (the
// last one fastest), and each combination is repeated count times.
func (sw *sweep) vars(i int) *vars {
	v := &vars{index: i, count: sw.total, params: make([]string, len(sw.values))}
	c := i / sw.count
	for k := len(sw.values) - 1; k >= 0; k-- {
		n := len(sw.values[k])
		v.params[k] = sw.values[k][c%n]
		c /= n
	}
	return v
}

// expand turns the plans into tasks: one plan per task of a list, or one
// plan repeated total times for a template.
func (d *decoder) expand(root *yaml.Node, plans []*plan, sw *sweep, total int) []Task {
	in := &inputReader{fsys: d.opts.InputFS, maxFile: d.opts.MaxInputFileBytes, maxTotal: d.opts.MaxInputTotalBytes, cache: map[string]*loaded{}}
	tasks := make([]Task, 0, total)
	firstByName := make(map[string]int, total)
	var bytes int64
	for i := 0; i < total && !d.Full(); i++ {
		var p *plan
		var v *vars
		if sw != nil {
			p, v = plans[0], sw.vars(i)
		} else {
			p, v = plans[i], &vars{index: i, count: total}
		}
		t, size, ok := d.expandTask(p, v, in)
		bytes += size
		if bytes > d.opts.MaxJobBytes {
			d.At(root, "", "the tasks take more than %d bytes once expanded (at task %d of %d): shorten them or split the job", d.opts.MaxJobBytes, i, total)
			return nil
		}
		if !ok {
			continue
		}
		if j, dup := firstByName[t.Name]; dup {
			switch {
			case p.name == nil:
				d.At(p.node, p.path, "the default name %q is already used by task %d: give this task a name", t.Name, j)
			case p.template:
				d.Once(p.name.node, p.name.path, nil, "tasks %d and %d are both named %q: task names must be unique (use {{index}})", j, i, t.Name)
			default:
				d.At(p.name.node, p.name.path, "duplicate task name %q (already used by task %d)", t.Name, j)
			}
			continue
		}
		firstByName[t.Name] = i
		tasks = append(tasks, t)
	}
	return tasks
}

// expandTask substitutes one task's placeholders and checks the results.
// size approximates the memory the task takes.
func (d *decoder) expandTask(p *plan, v *vars, in *inputReader) (Task, int64, bool) {
	ok := true
	// who names the task in errors found at a node that several tasks
	// share: the template's, or the defaults' in a list.
	who := func(t *tmpl) string {
		if !p.template && strings.HasPrefix(t.path, p.path+".") {
			return ""
		}
		if p.template {
			return "index " + strconv.Itoa(v.index) + ": "
		}
		return yamlfile.Index("tasks", v.index) + ": "
	}
	str := func(t *tmpl, check func(string) (string, error)) (string, bool) {
		if t.static() {
			return t.raw, true // checked when parsed
		}
		s, err := check(t.expand(v))
		if err != nil {
			d.Once(t.node, t.path, nil, "%s%v", who(t), err)
			ok = false
			return "", false
		}
		return s, true
	}
	const overhead = 16 // a string header
	size := int64(200)  // the Task itself, slices and map headers

	t := Task{SizeMFlop: p.sizeMFlop, WallClockLimit: p.wall, Checkpointable: p.ckpt,
		CPUs: p.cpus, MemoryBytes: p.memory, GPUs: p.gpus, Requirements: p.reqs,
		MaxAttempts: p.maxAttempts, Retries: p.retries,
		Class: p.class, Deadline: p.deadline, OnMiss: p.onMiss, Nodes: p.nodes,
		Alternatives: slices.Clone(p.alts)}
	if p.name == nil {
		t.Name = "task-" + strconv.Itoa(v.index)
	} else {
		t.Name, _ = str(p.name, checkTaskName)
	}
	size += overhead + int64(len(t.Name))

	argEnv := 0
	t.Argv = make([]string, len(p.argv))
	for i, a := range p.argv {
		check := checkArg
		if i == 0 {
			check = checkCommand
		}
		t.Argv[i], _ = str(a, check)
		argEnv += len(t.Argv[i]) + 1
		size += overhead + int64(len(t.Argv[i]))
	}
	if len(p.env) > 0 {
		t.Env = make(map[string]string, len(p.env))
		for _, e := range p.env {
			val, _ := str(e.val, checkArg)
			t.Env[e.key] = val
			argEnv += len(e.key) + len(val) + 2
			size += 3*overhead + int64(len(e.key)+len(val))
		}
	}
	if argEnv > maxArgEnvBytes {
		d.Once(p.node, p.path, nil, "%sargv and env take %d bytes, more than %d", whoTask(p, v), argEnv, maxArgEnvBytes)
		ok = false
	}

	if len(p.outputs) > 0 {
		t.Outputs = make([]string, 0, len(p.outputs))
		for _, o := range p.outputs {
			s, good := str(o, checkOutput)
			if !good {
				continue
			}
			if slices.Contains(t.Outputs, s) {
				d.Once(o.node, o.path, nil, "%soutput pattern %q is given twice", who(o), s)
				ok = false
				continue
			}
			t.Outputs = append(t.Outputs, s)
			size += overhead + int64(len(s))
		}
	}

	if p.inputs != nil {
		if in.fsys == nil {
			d.Once(p.inputs.node, p.inputs.path, nil, "input files are read relative to the job file: use Load (or set Options.InputFS)")
			return t, size, false
		}
		t.Inputs = make([]Input, 0, len(p.inputs.items))
		byName := make(map[string]int, len(p.inputs.items))
		var names []string // in file order, for deterministic messages
		for k, spec := range p.inputs.items {
			src, good := str(spec.src, checkInputPath)
			if !good {
				continue
			}
			name := path.Base(src)
			if spec.name != nil {
				if name, good = str(spec.name, checkInputName); !good {
					continue
				}
			}
			if j, dup := byName[name]; dup {
				d.Once(spec.node, spec.path, nil, "%stwo input files are named %q (inputs[%d] and inputs[%d]): give one a different name", whoTask(p, v), name, j, k)
				ok = false
				continue
			}
			byName[name] = k
			names = append(names, name)
			l := in.read(src)
			if l.msg != "" {
				d.Once(spec.src.node, spec.src.path, l.cause, "%s%s", who(spec.src), l.msg)
				ok = false
				continue
			}
			t.Inputs = append(t.Inputs, Input{Name: name, Data: l.data})
			size += 2*overhead + int64(len(name))
		}
		// The executor writes inputs as files: "a" and "a/b" cannot both be.
		for _, name := range names {
			k := byName[name]
			for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
				if j, clash := byName[dir]; clash {
					d.Once(p.inputs.node, p.inputs.path, nil, "%sinput %q (inputs[%d]) is also the directory of input %q (inputs[%d])", whoTask(p, v), dir, j, name, k)
					ok = false
				}
			}
		}
	}
	return t, size, ok
}

// whoTask names the task for errors reported at the task's own node.
func whoTask(p *plan, v *vars) string {
	if p.template {
		return "index " + strconv.Itoa(v.index) + ": "
	}
	return ""
}

// inputReader reads input files once each, however many tasks ship them,
// and keeps the job's total.
type inputReader struct {
	fsys     fs.FS
	maxFile  int64
	maxTotal int64
	total    int64
	cache    map[string]*loaded
}

type loaded struct {
	data  []byte
	cause error
	msg   string
}

// read returns a file's content, or an error message (and its cause),
// reading each file once per job.
func (r *inputReader) read(name string) *loaded {
	if l, ok := r.cache[name]; ok {
		return l
	}
	l := r.load(name)
	r.cache[name] = l
	return l
}

func (r *inputReader) load(name string) *loaded {
	fail := func(cause error, format string, args ...any) *loaded {
		return &loaded{cause: cause, msg: fmt.Sprintf(format, args...)}
	}
	fi, err := fs.Stat(r.fsys, name)
	if err != nil {
		return fail(err, "cannot read input %q: %v", name, unwrapPath(err))
	}
	switch {
	case fi.IsDir():
		return fail(nil, "input %q is a directory: list its files", name)
	case !fi.Mode().IsRegular():
		return fail(nil, "input %q is not a regular file", name)
	case fi.Size() > r.maxFile:
		return fail(nil, "input %q is %d bytes, more than the %d allowed per input file", name, fi.Size(), r.maxFile)
	case r.total+fi.Size() > r.maxTotal:
		return fail(nil, "input %q (%d bytes) brings the job's input files over the %d bytes allowed in total", name, fi.Size(), r.maxTotal)
	}
	f, err := r.fsys.Open(name)
	if err != nil {
		return fail(err, "cannot read input %q: %v", name, unwrapPath(err))
	}
	defer f.Close()
	// The file may have grown since Stat: read one byte past the limit.
	data, err := io.ReadAll(io.LimitReader(f, r.maxFile+1))
	if err != nil {
		return fail(err, "cannot read input %q: %v", name, unwrapPath(err))
	}
	switch {
	case int64(len(data)) > r.maxFile:
		return fail(nil, "input %q is more than the %d bytes allowed per input file", name, r.maxFile)
	case r.total+int64(len(data)) > r.maxTotal:
		return fail(nil, "input %q (%d bytes) brings the job's input files over the %d bytes allowed in total", name, len(data), r.maxTotal)
	}
	r.total += int64(len(data))
	return &loaded{data: data}
}
