package executor

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// MachinesFile is a peer's machines file: the machines it offers and the
// owner's policy for them.
//
//	machines:
//	  - name: node1
//	    gflops: 120        # optional: measured by `peer init` when absent
//	    busy_watts: 180
//	    idle_watts: 40     # optional, reported only
//	    cpus: 8            # optional: tasks share them (default: one slot)
//	    memory: 16GiB      # optional
//	    gpus: 1            # optional
//	    labels: [matlab, cuda=12.2]   # optional
//	    opportunistic: true  # optional: its owner may reclaim it (peer machines reclaim)
//	    reclaim_load: 0.5    # optional (opportunistic only): reclaim it by itself above this owner load
//	    reclaim_after: 1m    # optional: how long the load must stay above (default 1m)
//	    release_after: 5m    # optional: how long below half of it before release (default 5m)
//	    host: node1.example.org       # optional: the name MPI reaches it by (default: name)
//	policy:                # optional: without it nothing may run
//	  allow: [/usr/bin/python3, sh]
//	  allow_any: false
//	  orgs: [uni-b, uni-c] # optional: who besides the owner may use them
//	  run_as: nobody
//	  path: /usr/local/bin:/usr/bin:/bin
//	  max_wall_clock: 12h
//	  kill_grace: 10s
//	  max_cpu_seconds: 36000
//	  max_address_space_bytes: 8589934592
//	  max_processes: 256
//	  max_input_bytes: 67108864
//	  max_output_bytes: 1073741824
//	  max_output_files: 10000
//	  max_log_bytes: 16777216
//	  max_memory_bytes: 4294967296
//	  max_cpus: 2
//	  max_disk_bytes: 10737418240
//	  keep_task_dirs: 1h
type MachinesFile struct {
	Machines []MachineConfig
	Policy   Policy
	// Slurm is the file's slurm section, left for executor/slurm to read
	// (docs/SLURM.md): the machines are then the cluster's nodes, and the
	// file has no machines list.
	Slurm *yaml.Node
}

// MeasureMissingGFLOPS measures this host once with MeasureGFLOPS (for
// about d) and gives the result to every machine declared without gflops:
// the machines of a process executor are slots of this host. It returns
// the names of the machines it filled in.
func (f *MachinesFile) MeasureMissingGFLOPS(ctx context.Context, d time.Duration) ([]string, error) {
	var missing []string
	for _, m := range f.Machines {
		if m.GFLOPS == 0 {
			missing = append(missing, m.Name)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	g, err := MeasureGFLOPS(ctx, d)
	if err != nil {
		return nil, err
	}
	// Three decimals: exactly what the ledger keeps (MFLOPS).
	g = math.Round(g*1000) / 1000
	for i := range f.Machines {
		if f.Machines[i].GFLOPS == 0 {
			f.Machines[i].GFLOPS = g
		}
	}
	return missing, nil
}

// FileError is an error at a position of a machines file.
type FileError struct {
	File         string
	Line, Column int
	// Field is the path of the offending field, e.g. machines[1].busy_watts.
	Field string
	Msg   string
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// maxMachinesFileBytes bounds what is read.
const maxMachinesFileBytes = 1 << 20

// LoadMachinesFile reads and checks a machines file.
func LoadMachinesFile(path string) (*MachinesFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("machines file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxMachinesFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("machines file %s: %w", path, err)
	}
	return ParseMachinesFile(path, data)
}

// ParseMachinesFile checks a machines file's content; name is used in
// error messages. Unknown keys, duplicate keys or machine names, missing
// required fields and negative, NaN or infinite numbers are errors naming
// the file, line and field. A machine without gflops gets 0 (to be
// measured); every other value is checked as MachineConfig.Validate and
// Policy.Validate would.
func ParseMachinesFile(name string, data []byte) (*MachinesFile, error) {
	if len(data) > maxMachinesFileBytes {
		return nil, &FileError{File: name, Msg: fmt.Sprintf("larger than %d bytes", maxMachinesFileBytes)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := yamlfile.SyntaxErrorLine(err)
		return nil, &FileError{File: name, Line: line, Msg: msg}
	}
	p := newFileParser(name)
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &FileError{File: name, Msg: "empty file: want a mapping with a machines list"}
	}
	root := doc.Content[0]
	var out MachinesFile
	var sawMachines bool
	err := p.Mapping(root, "", func(key string, k, v *yaml.Node, field string) error {
		switch key {
		case "machines":
			sawMachines = true
			ms, err := p.machines(v, field)
			out.Machines = ms
			return err
		case "policy":
			pol, err := p.policy(v, field)
			out.Policy = pol
			return err
		case "slurm":
			if v.Kind != yaml.MappingNode {
				return p.Errf(v, field, "want a mapping, got %s", yamlfile.KindName(v))
			}
			out.Slurm = v
			return nil
		}
		return p.Errf(k, field, "unknown key (want machines, policy or slurm)")
	})
	if err != nil {
		return nil, err
	}
	switch {
	case out.Slurm != nil && sawMachines:
		return nil, p.Errf(root, "machines", "a file with a slurm section takes its machines from the cluster: remove the machines list (docs/SLURM.md)")
	case out.Slurm == nil && !sawMachines:
		return nil, p.Errf(root, "machines", "missing")
	}
	return &out, nil
}

// fileParser reads a machines file; its errors are *FileError.
type fileParser struct {
	yamlfile.Parser
	file string
}

func newFileParser(file string) fileParser {
	return fileParser{file: file, Parser: yamlfile.Parser{MakeErr: func(n *yaml.Node, field, msg string) error {
		e := &FileError{File: file, Field: field, Msg: msg}
		if n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
		return e
	}}}
}

func (p fileParser) machines(n *yaml.Node, field string) ([]MachineConfig, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.Errf(n, field, "want a list of machines, got %s", yamlfile.KindName(n))
	}
	if len(n.Content) == 0 {
		return nil, p.Errf(n, field, "empty list: declare at least one machine")
	}
	names := make(map[string]int)
	var ms []MachineConfig
	for i, mn := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		var m MachineConfig
		var sawName, sawBusy bool
		var loadKeys []*yaml.Node // reclaim_* keys, checked against opportunistic
		err := p.Mapping(mn, f, func(key string, k, v *yaml.Node, field string) error {
			var err error
			switch key {
			case "name":
				sawName = true
				if m.Name, err = p.Str(v, field); err != nil {
					return err
				}
				if !validIdent(m.Name, maxNameLen) {
					return p.Errf(v, field, "%q: want 1-%d characters of [A-Za-z0-9._-] starting with a letter or digit", m.Name, maxNameLen)
				}
				if prev, dup := names[m.Name]; dup {
					return p.Errf(v, field, "machine %q already declared at line %d", m.Name, prev)
				}
				names[m.Name] = v.Line
			case "gflops":
				if m.GFLOPS, err = p.Number(v, field); err != nil {
					return err
				}
				if err := checkNumber(m.GFLOPS, maxGFLOPS, false); err != nil {
					return p.Errf(v, field, "%v (leave it out to have it measured)", err)
				}
				if m.MFLOPS() == 0 {
					return p.Errf(v, field, "must be at least 0.001")
				}
			case "busy_watts":
				sawBusy = true
				if m.BusyWatts, err = p.Number(v, field); err != nil {
					return err
				}
				if err := checkNumber(m.BusyWatts, maxWatts, false); err != nil {
					return p.Errf(v, field, "%v", err)
				}
			case "idle_watts":
				if m.IdleWatts, err = p.Number(v, field); err != nil {
					return err
				}
				if err := checkNumber(m.IdleWatts, maxWatts, true); err != nil {
					return p.Errf(v, field, "%v", err)
				}
			case "cpus":
				var c uint64
				if c, err = p.Count(v, field); err == nil && c > maxCPUs {
					err = p.Errf(v, field, "%d is over the limit %d", c, maxCPUs)
				}
				m.CPUs = int64(c)
			case "gpus":
				var c uint64
				if c, err = p.Count(v, field); err == nil && c > maxGPUs {
					err = p.Errf(v, field, "%d is over the limit %d", c, maxGPUs)
				}
				m.GPUs = int64(c)
			case "memory":
				m.MemoryBytes, err = p.Bytes(v, field)
			case "labels":
				m.Labels, err = p.labels(v, field)
			case "opportunistic":
				m.Opportunistic, err = p.Boolean(v, field)
			case "reclaim_load":
				loadKeys = append(loadKeys, k)
				if m.ReclaimLoad, err = p.Number(v, field); err == nil && !(m.ReclaimLoad > 0 && m.ReclaimLoad <= maxReclaimLoad) {
					err = p.Errf(v, field, "%g: want an owner load above 0 and at most %g (CPUs busy per CPU of the host)", m.ReclaimLoad, float64(maxReclaimLoad))
				}
			case "reclaim_after", "release_after":
				loadKeys = append(loadKeys, k)
				var d time.Duration
				if d, err = p.Duration(v, field); err == nil && (d < time.Second || d > maxLoadHold) {
					err = p.Errf(v, field, "%s: want between 1s and %s", d, maxLoadHold)
				}
				if key == "reclaim_after" {
					m.ReclaimAfter = d
				} else {
					m.ReleaseAfter = d
				}
			case "host":
				if m.Host, err = p.Str(v, field); err != nil {
					return err
				}
				if !validHost(m.Host) {
					return p.Errf(v, field, "%q: want a host name of 1-%d characters of [A-Za-z0-9._:-]", m.Host, maxHostLen)
				}
			default:
				return p.Errf(k, field, "unknown key (want name, gflops, busy_watts, idle_watts, cpus, memory, gpus, labels, opportunistic, reclaim_load, reclaim_after, release_after, host)")
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if !sawName {
			return nil, p.Errf(mn, f+".name", "missing")
		}
		if !sawBusy {
			return nil, p.Errf(mn, f+".busy_watts", "missing")
		}
		for _, k := range loadKeys {
			switch {
			case !m.Opportunistic:
				return nil, p.Errf(k, f+"."+k.Value, "only an opportunistic machine is reclaimed on load: add opportunistic: true")
			case m.ReclaimLoad == 0:
				return nil, p.Errf(k, f+"."+k.Value, "needs reclaim_load, the owner load to reclaim the machine at")
			}
		}
		if m.IdleWatts > m.BusyWatts {
			return nil, p.Errf(mn, f+".idle_watts", "%g is more than busy_watts %g", m.IdleWatts, m.BusyWatts)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

func (p fileParser) policy(n *yaml.Node, field string) (Policy, error) {
	var pol Policy
	err := p.Mapping(n, field, func(key string, k, v *yaml.Node, field string) error {
		var err error
		var u uint64
		switch key {
		case "allow":
			if v.Kind != yaml.SequenceNode {
				return p.Errf(v, field, "want a list of executables, got %s", yamlfile.KindName(v))
			}
			for i, e := range v.Content {
				f := fmt.Sprintf("%s[%d]", field, i)
				s, err := p.Str(e, f)
				if err != nil {
					return err
				}
				if err := (Policy{Allow: []string{s}}).Validate(); err != nil {
					return p.Errf(e, f, "%v", err)
				}
				pol.Allow = append(pol.Allow, s)
			}
		case "allow_any":
			pol.AllowAny, err = p.Boolean(v, field)
		case "orgs":
			pol.Orgs, err = p.names(v, field)
		case "unsafe_run_as_peer_user":
			pol.UnsafeRunAsPeerUser, err = p.Boolean(v, field)
		case "run_as":
			if pol.RunAs, err = p.Str(v, field); err == nil {
				if _, _, perr := parseRunAs(pol.RunAs, true); perr != nil {
					err = p.Errf(v, field, "%v", perr)
				}
			}
		case "path":
			if pol.Path, err = p.Str(v, field); err == nil {
				if verr := (Policy{Path: pol.Path}).Validate(); verr != nil {
					err = p.Errf(v, field, "%v", verr)
				}
			}
		case "max_wall_clock":
			pol.MaxWallClock, err = p.Duration(v, field)
		case "kill_grace":
			pol.KillGrace, err = p.Duration(v, field)
		case "max_cpu_seconds":
			pol.MaxCPUSeconds, err = p.Count(v, field)
		case "max_address_space_bytes":
			pol.MaxAddressSpaceBytes, err = p.Count(v, field)
		case "max_processes":
			pol.MaxProcesses, err = p.Count(v, field)
		case "max_input_bytes":
			u, err = p.Count(v, field)
			pol.MaxInputBytes = int64(u)
		case "max_output_bytes":
			u, err = p.Count(v, field)
			pol.MaxOutputBytes = int64(u)
		case "max_output_files":
			u, err = p.Count(v, field)
			if err == nil && u > math.MaxInt32 {
				err = p.Errf(v, field, "%d is over the limit %d", u, math.MaxInt32)
			}
			pol.MaxOutputFiles = int(u)
		case "max_log_bytes":
			u, err = p.Count(v, field)
			pol.MaxLogBytes = int64(u)
		case "max_memory_bytes":
			pol.MaxMemoryBytes, err = p.Count(v, field)
		case "max_disk_bytes":
			u, err = p.Count(v, field)
			pol.MaxDiskBytes = int64(u)
		case "max_cpus":
			if pol.MaxCPUs, err = p.Number(v, field); err == nil {
				if verr := (Policy{MaxCPUs: pol.MaxCPUs}).Validate(); verr != nil {
					err = p.Errf(v, field, "%v", verr)
				}
			}
		case "keep_task_dirs":
			pol.KeepTaskDirs, err = p.Duration(v, field)
		default:
			return p.Errf(k, field, "unknown key")
		}
		return err
	})
	if err != nil {
		return Policy{}, err
	}
	if err := pol.Validate(); err != nil {
		return Policy{}, p.Errf(n, field, "%v", err)
	}
	return pol, nil
}

// labels reads a list of machine labels, "name" or "name=value".
func (p fileParser) labels(n *yaml.Node, field string) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.Errf(n, field, "want a list of labels, got %s", yamlfile.KindName(n))
	}
	if len(n.Content) > maxLabels {
		return nil, p.Errf(n, field, "%d labels, more than %d", len(n.Content), maxLabels)
	}
	seen := map[string]bool{}
	var out []string
	for i, e := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := p.Str(e, f)
		if err != nil {
			return nil, err
		}
		if !ValidLabel(s) {
			return nil, p.Errf(e, f, "%q: want name or name=value (name: 1-64 characters of [A-Za-z0-9._-] starting with a letter or digit; value: at most 64 characters, no spaces or commas)", s)
		}
		name, _, _ := strings.Cut(s, "=")
		if seen[name] {
			return nil, p.Errf(e, f, "label %q declared twice", name)
		}
		seen[name] = true
		out = append(out, s)
	}
	return out, nil
}

// names reads a list of organisation names.
func (p fileParser) names(n *yaml.Node, field string) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.Errf(n, field, "want a list of organisations, got %s", yamlfile.KindName(n))
	}
	var out []string
	for i, e := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := p.Str(e, f)
		if err != nil {
			return nil, err
		}
		if !validIdent(s, maxNameLen) {
			return nil, p.Errf(e, f, "%q: want an organisation name (1-%d characters of [A-Za-z0-9._-])", s, maxNameLen)
		}
		out = append(out, s)
	}
	return out, nil
}

// ValidLabel reports whether l is a machine label: "name" or "name=value"
// (the ledger's rule, ledger.ValidLabel).
func ValidLabel(l string) bool {
	name, value, hasValue := strings.Cut(l, "=")
	if !validIdent(name, 64) {
		return false
	}
	if !hasValue {
		return true
	}
	if value == "" || len(value) > 64 {
		return false
	}
	for _, c := range value {
		if c <= ' ' || c == ',' || c == 0x7f {
			return false
		}
	}
	return true
}
