// Package jobfile reads the job files that users submit with
// `peer submit JOBFILE`: a bag of independent tasks, written as a list or
// as one task template repeated with {{index}} (and optionally swept over
// parameters), in YAML or JSON.
//
// The format is documented in docs/JOBS.md; examples are in examples/jobs/.
// Reading is strict and complete before anything is submitted: unknown
// keys, wrong types, out-of-range values, escaping paths, missing or
// oversized input files are errors naming the file, line, column and field
// path, several at once, and nothing is returned with an error. Sizes are
// exact: decimal GFlop become integer MFlop without float rounding, like
// the rest of the project.
package jobfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// Error is one problem found in a job file: the file, the position (1-based
// line and column; 0 when unknown) and the field path, e.g.
//
//	sweep.yaml:12:7: tasks[3].wall_clock_limit: must be > 0, got "-5m"
//
// Err is the underlying error when there is one (a missing input file:
// errors.Is(err, fs.ErrNotExist) holds). It is the one positioned error
// type of every strict reader (internal/yamlfile), named here for the
// callers of this package.
type Error = yamlfile.Error

// Job is a parsed job file, every template expanded.
type Job struct {
	// Name is the `name` key, else the file's base name without its
	// extension (or "job" when that is not a valid name).
	Name  string
	Tasks []Task
}

// Task is one fully resolved task: defaults applied, placeholders
// substituted, sizes converted, input files read.
type Task struct {
	// Name is unique within the job: 1-64 characters of [A-Za-z0-9_.-]
	// starting with a letter or digit. Default: "task-<index>".
	Name string
	// Argv is the command, never empty; Argv[0] is not empty.
	Argv []string
	// Env holds variables added to the task's environment (nil when none).
	Env map[string]string
	// SizeMFlop is the task's work in MFlop (1 GFlop = 1000 MFlop), > 0:
	// `size` exactly, or `runtime` × `reference_gflops` rounded to the
	// nearest MFlop.
	SizeMFlop int64
	// WallClockLimit bounds one run of the task; > 0.
	WallClockLimit time.Duration
	// Inputs are the files shipped with the task, in file order (nil when
	// none). Tasks that ship the same file share its Data: do not modify it.
	Inputs []Input
	// Outputs are glob patterns (path.Match syntax) relative to the task's
	// working directory, cleaned; none is absolute or contains "..".
	Outputs []string
	// Checkpointable says the task saves its state under $CHECKPOINT_DIR
	// and resumes from it.
	Checkpointable bool
	// CPUs (0 when not given: the default, DefaultCPUs), MemoryBytes and
	// GPUs (default 0) are what the task needs of a machine; Requirements constrain the
	// machine's attributes (nil when none). Tasks may share Requirements.
	CPUs         int64
	MemoryBytes  int64
	GPUs         int64
	Requirements []Requirement
	// MaxAttempts is how many runs failed by their machines (refused, not
	// started) the task tolerates before it fails: 0 when not given (the
	// ledger's default, 3), else 1-100. Retries is how many times a run
	// failed by the task itself is run again (0-100, default 0).
	MaxAttempts int
	Retries     int
	// Nodes is how many machines the task spans (issue 21): 0 when not
	// given, or 1, is one machine; k ≥ 2 (at most MaxNodes) makes it a
	// parallel job of k parts, each asking for CPUs, MemoryBytes and GPUs
	// of its own machine, all started together on machines of one
	// organisation (docs/JOBS.md, "Parallel jobs").
	Nodes int
	// Class is "nice", "soft-deadline" or "" (not given: no class, placed
	// by the federation's policy alone). A soft-deadline task has a
	// Deadline; OnMiss ("refuse", "nice" or "": refuse) says what happens
	// when no machine can meet it at submission (docs/JOBS.md, "Deadlines").
	Class    string
	Deadline Deadline
	OnMiss   string
	// Alternatives are a moldable task's requests (2 to MaxAlternatives,
	// nil when none), of which the submitting peer runs one; Nodes, CPUs
	// and WallClockLimit are the first's (docs/JOBS.md, "Moldable jobs").
	Alternatives []Alternative
}

// Input is one file shipped with a task.
type Input struct {
	// Name is where the file lands, relative to the task's working
	// directory: a clean relative path without "..".
	Name string
	Data []byte
}

// Default limits: Options fields left at zero (or negative) take these.
const (
	DefaultMaxFileBytes       = 1 << 20
	DefaultMaxTasks           = 100_000
	DefaultMaxDepth           = 32
	DefaultMaxNodes           = 250_000
	DefaultMaxInputFileBytes  = 1 << 20
	DefaultMaxInputTotalBytes = 16 << 20
	DefaultMaxWallClock       = 7 * 24 * time.Hour
	DefaultMaxJobBytes        = 256 << 20
)

// Options carries the limits a job file is held to, and where its input
// files are read from. The zero value is usable: every limit at zero or
// below takes its Default.
type Options struct {
	// MaxFileBytes bounds the job file itself.
	MaxFileBytes int64
	// MaxTasks bounds the tasks of one job (list or expanded template).
	MaxTasks int
	// MaxDepth bounds nesting; the format needs 5 levels.
	MaxDepth int
	// MaxNodes bounds the YAML nodes (scalars, lists, mappings) of the file.
	MaxNodes int
	// MaxInputFileBytes bounds each input file; MaxInputTotalBytes all the
	// job's input files together, each distinct file counted once.
	MaxInputFileBytes  int64
	MaxInputTotalBytes int64
	// MaxWallClock bounds every task's wall_clock_limit.
	MaxWallClock time.Duration
	// MaxJobBytes bounds the memory the expanded tasks take (strings and
	// their bookkeeping, not input data, which tasks share): a tiny
	// template with a huge count cannot ask for gigabytes.
	MaxJobBytes int64
	// InputFS is the directory input paths are relative to. Load sets it to
	// the job file's directory when nil. Parse with a nil InputFS rejects
	// a job that names input files.
	InputFS fs.FS
}

func (o Options) withDefaults() Options {
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxTasks <= 0 {
		o.MaxTasks = DefaultMaxTasks
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxNodes <= 0 {
		o.MaxNodes = DefaultMaxNodes
	}
	if o.MaxInputFileBytes <= 0 {
		o.MaxInputFileBytes = DefaultMaxInputFileBytes
	}
	if o.MaxInputTotalBytes <= 0 {
		o.MaxInputTotalBytes = DefaultMaxInputTotalBytes
	}
	if o.MaxWallClock <= 0 {
		o.MaxWallClock = DefaultMaxWallClock
	}
	if o.MaxJobBytes <= 0 {
		o.MaxJobBytes = DefaultMaxJobBytes
	}
	return o
}

// Load reads the job file at path and parses it. Unless opts.InputFS is
// set, input files are read from the job file's directory, through an
// os.Root: an input path, or a symbolic link on the way to it, cannot
// leave that directory.
func Load(path string, opts Options) (*Job, error) {
	opts = opts.withDefaults()
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Msg: yamlfile.OneLine(fmt.Sprintf("cannot read job file: %v", unwrapPath(err))), Err: err}
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		return nil, &Error{File: path, Msg: "not a regular file"}
	}
	data, err := io.ReadAll(io.LimitReader(f, opts.MaxFileBytes+1))
	if err != nil {
		return nil, &Error{File: path, Msg: yamlfile.OneLine(fmt.Sprintf("cannot read job file: %v", unwrapPath(err))), Err: err}
	}
	if opts.InputFS == nil {
		root, err := os.OpenRoot(filepath.Dir(path))
		if err != nil {
			return nil, &Error{File: path, Msg: yamlfile.OneLine(fmt.Sprintf("cannot open the job file's directory: %v", unwrapPath(err))), Err: err}
		}
		defer root.Close()
		opts.InputFS = root.FS()
	}
	return Parse(path, data, opts)
}

// unwrapPath drops the path an *fs.PathError repeats: the Error already
// names the file.
func unwrapPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// Parse parses a job file from data. filename labels errors, gives the
// job's default name, and selects the syntax: a name ending in ".json"
// (any case) is read as strict JSON, anything else as YAML. Input files
// are read from opts.InputFS.
//
// Every error names the file; a problem inside the file also names line,
// column and field path. Several problems are reported together (joined,
// one per line, each an *Error), up to 20. On error the Job is nil.
func Parse(filename string, data []byte, opts Options) (*Job, error) {
	opts = opts.withDefaults()
	if int64(len(data)) > opts.MaxFileBytes {
		return nil, &Error{File: filename, Msg: fmt.Sprintf("file is larger than %d bytes", opts.MaxFileBytes)}
	}
	d := &decoder{ErrorList: yamlfile.ErrorList{File: filename}, opts: opts}
	root, err := d.decode(filename, data)
	if err != nil {
		return nil, err
	}
	d.check(root, "", 0)
	if err := d.Err(); err != nil {
		return nil, err
	}
	job := d.job(root, filename)
	if err := d.Err(); err != nil {
		return nil, err
	}
	return job, nil
}

// decode reads the syntax the file name says: JSON for ".json", else YAML.
func (d *decoder) decode(filename string, data []byte) (*yaml.Node, error) {
	if strings.EqualFold(filepath.Ext(filename), ".json") {
		return decodeJSON(filename, data, d.opts.MaxDepth)
	}
	return yamlDocument.Decode(filename, data)
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// maxNameLen matches the ledger's name limit.
const maxNameLen = 64

func validName(s string) bool { return len(s) <= maxNameLen && nameRE.MatchString(s) }

// defaultJobName is the file's base name without extension, if valid.
func defaultJobName(filename string) string {
	base := filepath.Base(filename)
	name := strings.TrimSuffix(base, filepath.Ext(base))
	if validName(name) {
		return name
	}
	return "job"
}
