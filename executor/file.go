package executor

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// MachinesFile is a peer's machines file: the machines it offers and the
// owner's policy for them.
//
//	machines:
//	  - name: node1
//	    gflops: 120        # optional: measured by `peer init` when absent
//	    busy_watts: 180
//	    idle_watts: 40     # optional, reported only
//	policy:                # optional: without it nothing may run
//	  allow: [/usr/bin/python3, sh]
//	  allow_any: false
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
type MachinesFile struct {
	Machines []MachineConfig
	Policy   Policy
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
		line, msg := yamlErrLine(err)
		return nil, &FileError{File: name, Line: line, Msg: msg}
	}
	p := fileParser{file: name}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &FileError{File: name, Msg: "empty file: want a mapping with a machines list"}
	}
	root := doc.Content[0]
	var out MachinesFile
	var sawMachines bool
	err := p.mapping(root, "", func(key string, k, v *yaml.Node, field string) error {
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
		}
		return p.errf(k, field, "unknown key (want machines or policy)")
	})
	if err != nil {
		return nil, err
	}
	if !sawMachines {
		return nil, p.errf(root, "machines", "missing")
	}
	return &out, nil
}

// yamlErrLine splits a yaml.v3 syntax error ("yaml: line 3: ...") into
// its line (0 if none) and the rest of the message.
func yamlErrLine(err error) (int, string) {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	rest, ok := strings.CutPrefix(s, "line ")
	if !ok {
		return 0, s
	}
	num, msg, ok := strings.Cut(rest, ": ")
	n, err2 := strconv.Atoi(num)
	if !ok || err2 != nil {
		return 0, s
	}
	return n, msg
}

type fileParser struct{ file string }

func (p fileParser) errf(n *yaml.Node, field, format string, args ...any) error {
	e := &FileError{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// mapping walks a mapping node, rejecting aliases and duplicate keys.
func (p fileParser) mapping(n *yaml.Node, field string, each func(key string, k, v *yaml.Node, field string) error) error {
	if n.Kind == yaml.AliasNode {
		return p.errf(n, field, "aliases are not supported")
	}
	if n.Kind != yaml.MappingNode {
		return p.errf(n, field, "want a mapping, got %s", kindName(n))
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return p.errf(k, field, "want a plain key")
		}
		f := join(field, k.Value)
		if seen[k.Value] {
			return p.errf(k, f, "duplicate key")
		}
		seen[k.Value] = true
		if v.Kind == yaml.AliasNode {
			return p.errf(v, f, "aliases are not supported")
		}
		if err := each(k.Value, k, v, f); err != nil {
			return err
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return "a value"
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

func (p fileParser) scalar(n *yaml.Node, field string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return p.errf(n, field, "want a value, got %s", kindName(n))
	}
	return nil
}

func (p fileParser) str(n *yaml.Node, field string) (string, error) {
	if err := p.scalar(n, field); err != nil {
		return "", err
	}
	if n.Tag != "!!str" {
		return "", p.errf(n, field, "want a string, got %q", n.Value)
	}
	return n.Value, nil
}

// number reads a finite, non-negative float (an integer is fine).
func (p fileParser) number(n *yaml.Node, field string) (float64, error) {
	if err := p.scalar(n, field); err != nil {
		return 0, err
	}
	if n.Tag != "!!int" && n.Tag != "!!float" {
		return 0, p.errf(n, field, "want a number, got %q", n.Value)
	}
	var x float64
	if err := n.Decode(&x); err != nil {
		return 0, p.errf(n, field, "want a number, got %q", n.Value)
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, p.errf(n, field, "want a finite number, got %s", n.Value)
	}
	if x < 0 {
		return 0, p.errf(n, field, "must not be negative, got %s", n.Value)
	}
	return x, nil
}

// count reads a non-negative integer.
func (p fileParser) count(n *yaml.Node, field string) (uint64, error) {
	if err := p.scalar(n, field); err != nil {
		return 0, err
	}
	if n.Tag != "!!int" {
		return 0, p.errf(n, field, "want a whole number, got %q", n.Value)
	}
	var x int64
	if err := n.Decode(&x); err != nil {
		return 0, p.errf(n, field, "want a whole number, got %q", n.Value)
	}
	if x < 0 {
		return 0, p.errf(n, field, "must not be negative, got %s", n.Value)
	}
	return uint64(x), nil
}

func (p fileParser) duration(n *yaml.Node, field string) (time.Duration, error) {
	s, err := p.str(n, field)
	if err != nil {
		return 0, p.errf(n, field, "want a duration such as 90s or 2h, got %q", n.Value)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, p.errf(n, field, "want a duration such as 90s or 2h: %v", err)
	}
	if d < 0 {
		return 0, p.errf(n, field, "must not be negative, got %s", s)
	}
	return d, nil
}

func (p fileParser) boolean(n *yaml.Node, field string) (bool, error) {
	if err := p.scalar(n, field); err != nil {
		return false, err
	}
	if n.Tag != "!!bool" {
		return false, p.errf(n, field, "want true or false, got %q", n.Value)
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		return false, p.errf(n, field, "want true or false, got %q", n.Value)
	}
	return b, nil
}

func (p fileParser) machines(n *yaml.Node, field string) ([]MachineConfig, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, field, "want a list of machines, got %s", kindName(n))
	}
	if len(n.Content) == 0 {
		return nil, p.errf(n, field, "empty list: declare at least one machine")
	}
	names := make(map[string]int)
	var ms []MachineConfig
	for i, mn := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		var m MachineConfig
		var sawName, sawBusy bool
		err := p.mapping(mn, f, func(key string, k, v *yaml.Node, field string) error {
			var err error
			switch key {
			case "name":
				sawName = true
				if m.Name, err = p.str(v, field); err != nil {
					return err
				}
				if !validIdent(m.Name, maxNameLen) {
					return p.errf(v, field, "%q: want 1-%d characters of [A-Za-z0-9._-] starting with a letter or digit", m.Name, maxNameLen)
				}
				if prev, dup := names[m.Name]; dup {
					return p.errf(v, field, "machine %q already declared at line %d", m.Name, prev)
				}
				names[m.Name] = v.Line
			case "gflops":
				if m.GFLOPS, err = p.number(v, field); err != nil {
					return err
				}
				if err := checkNumber(m.GFLOPS, maxGFLOPS, false); err != nil {
					return p.errf(v, field, "%v (leave it out to have it measured)", err)
				}
				if m.MFLOPS() == 0 {
					return p.errf(v, field, "must be at least 0.001")
				}
			case "busy_watts":
				sawBusy = true
				if m.BusyWatts, err = p.number(v, field); err != nil {
					return err
				}
				if err := checkNumber(m.BusyWatts, maxWatts, false); err != nil {
					return p.errf(v, field, "%v", err)
				}
			case "idle_watts":
				if m.IdleWatts, err = p.number(v, field); err != nil {
					return err
				}
				if err := checkNumber(m.IdleWatts, maxWatts, true); err != nil {
					return p.errf(v, field, "%v", err)
				}
			default:
				return p.errf(k, field, "unknown key (want name, gflops, busy_watts, idle_watts)")
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if !sawName {
			return nil, p.errf(mn, f+".name", "missing")
		}
		if !sawBusy {
			return nil, p.errf(mn, f+".busy_watts", "missing")
		}
		if m.IdleWatts > m.BusyWatts {
			return nil, p.errf(mn, f+".idle_watts", "%g is more than busy_watts %g", m.IdleWatts, m.BusyWatts)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

func (p fileParser) policy(n *yaml.Node, field string) (Policy, error) {
	var pol Policy
	err := p.mapping(n, field, func(key string, k, v *yaml.Node, field string) error {
		var err error
		var u uint64
		switch key {
		case "allow":
			if v.Kind != yaml.SequenceNode {
				return p.errf(v, field, "want a list of executables, got %s", kindName(v))
			}
			for i, e := range v.Content {
				f := fmt.Sprintf("%s[%d]", field, i)
				s, err := p.str(e, f)
				if err != nil {
					return err
				}
				if err := (Policy{Allow: []string{s}}).Validate(); err != nil {
					return p.errf(e, f, "%v", err)
				}
				pol.Allow = append(pol.Allow, s)
			}
		case "allow_any":
			pol.AllowAny, err = p.boolean(v, field)
		case "run_as":
			if pol.RunAs, err = p.str(v, field); err == nil {
				if _, _, perr := parseRunAs(pol.RunAs, true); perr != nil {
					err = p.errf(v, field, "%v", perr)
				}
			}
		case "path":
			if pol.Path, err = p.str(v, field); err == nil {
				if verr := (Policy{Path: pol.Path}).Validate(); verr != nil {
					err = p.errf(v, field, "%v", verr)
				}
			}
		case "max_wall_clock":
			pol.MaxWallClock, err = p.duration(v, field)
		case "kill_grace":
			pol.KillGrace, err = p.duration(v, field)
		case "max_cpu_seconds":
			pol.MaxCPUSeconds, err = p.count(v, field)
		case "max_address_space_bytes":
			pol.MaxAddressSpaceBytes, err = p.count(v, field)
		case "max_processes":
			pol.MaxProcesses, err = p.count(v, field)
		case "max_input_bytes":
			u, err = p.count(v, field)
			pol.MaxInputBytes = int64(u)
		case "max_output_bytes":
			u, err = p.count(v, field)
			pol.MaxOutputBytes = int64(u)
		case "max_output_files":
			u, err = p.count(v, field)
			if err == nil && u > math.MaxInt32 {
				err = p.errf(v, field, "%d is over the limit %d", u, math.MaxInt32)
			}
			pol.MaxOutputFiles = int(u)
		case "max_log_bytes":
			u, err = p.count(v, field)
			pol.MaxLogBytes = int64(u)
		default:
			return p.errf(k, field, "unknown key")
		}
		return err
	})
	if err != nil {
		return Policy{}, err
	}
	if err := pol.Validate(); err != nil {
		return Policy{}, p.errf(n, field, "%v", err)
	}
	return pol, nil
}
