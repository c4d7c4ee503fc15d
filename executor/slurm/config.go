package slurm

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// Settings is the machines file's slurm section (docs/SLURM.md):
//
//	slurm:
//	  partition: grid          # the partition jobs go to (default: the cluster's default)
//	  account: coopgrid        # sbatch --account (optional)
//	  qos: federation          # sbatch --qos (optional)
//	  nodes: [cn01, cn02]      # optional: only these nodes (default: every node of the partition)
//	  share: 50%               # of each node's CPUs and memory offered (default 100%)
//	  gflops_per_cpu: 10       # required: the federation's speed unit
//	  busy_watts_per_cpu: 12   # required: the power model's busy draw
//	  idle_watts_per_cpu: 4    # optional, reported only
//	  tasks_dir: /shared/coopgrid/tasks  # on a file system the nodes share (default DATA/tasks)
//	  poll_interval: 2s        # squeue and sinfo (default 2s)
//	  bin_dir: /usr/bin        # where sbatch & co are (default: PATH)
type Settings struct {
	Partition, Account, QoS string
	Nodes                   []string
	// Share is the fraction of each node offered, in (0, 1].
	Share float64
	// GFLOPSPerCPU and the watts are per CPU offered.
	GFLOPSPerCPU, BusyWattsPerCPU, IdleWattsPerCPU float64
	TasksDir                                       string
	PollInterval                                   time.Duration
	BinDir                                         string
}

// DefaultPollInterval paces squeue and sinfo.
const DefaultPollInterval = 2 * time.Second

// slurmWord is what may go into an sbatch option: Slurm's names.
func slurmWord(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// ParseSettings reads the slurm section of the machines file mf, named
// file. Errors name the file, line and field.
func ParseSettings(file string, mf *executor.MachinesFile) (Settings, error) {
	s := Settings{Share: 1, PollInterval: DefaultPollInterval}
	p := yamlfile.Parser{MakeErr: func(n *yaml.Node, field, msg string) error {
		e := &executor.FileError{File: file, Field: field, Msg: msg}
		if n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
		return e
	}}
	if mf.Slurm == nil {
		return s, &executor.FileError{File: file, Field: "slurm", Msg: "missing: executor.kind slurm takes its machines from the slurm section (docs/SLURM.md)"}
	}
	var sawGFLOPS, sawBusy bool
	word := func(v *yaml.Node, f string) (string, error) {
		w, err := p.Str(v, f)
		if err == nil && !slurmWord(w) {
			err = p.Errf(v, f, "%q: want 1-128 characters of [A-Za-z0-9._-]", w)
		}
		return w, err
	}
	watts := func(v *yaml.Node, f string, allowZero bool) (float64, error) {
		x, err := p.Number(v, f)
		if err == nil && (math.IsNaN(x) || x < 0 || (x == 0 && !allowZero) || x > 1e6) {
			err = p.Errf(v, f, "%v: want a number in (0, 1e6]", x)
		}
		return x, err
	}
	err := p.Mapping(mf.Slurm, "slurm", func(key string, k, v *yaml.Node, f string) error {
		var err error
		switch key {
		case "partition":
			s.Partition, err = word(v, f)
		case "account":
			s.Account, err = word(v, f)
		case "qos":
			s.QoS, err = word(v, f)
		case "nodes":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				return p.Errf(v, f, "want a non-empty list of node names")
			}
			for i, n := range v.Content {
				w, err := word(n, yamlfile.Index(f, i))
				if err != nil {
					return err
				}
				s.Nodes = append(s.Nodes, w)
			}
		case "share":
			s.Share, err = parseShare(p, v, f)
		case "gflops_per_cpu":
			sawGFLOPS = true
			if s.GFLOPSPerCPU, err = p.Number(v, f); err == nil && !(s.GFLOPSPerCPU >= 0.001 && s.GFLOPSPerCPU <= 1e6) {
				err = p.Errf(v, f, "%v: want a number in [0.001, 1e6]", s.GFLOPSPerCPU)
			}
		case "busy_watts_per_cpu":
			sawBusy = true
			s.BusyWattsPerCPU, err = watts(v, f, false)
		case "idle_watts_per_cpu":
			s.IdleWattsPerCPU, err = watts(v, f, true)
		case "tasks_dir":
			if s.TasksDir, err = p.Str(v, f); err == nil && (!filepath.IsAbs(s.TasksDir) || filepath.Clean(s.TasksDir) != s.TasksDir) {
				err = p.Errf(v, f, "%q: want a clean absolute path", s.TasksDir)
			}
		case "poll_interval":
			if s.PollInterval, err = p.Duration(v, f); err == nil && (s.PollInterval < 100*time.Millisecond || s.PollInterval > time.Minute) {
				err = p.Errf(v, f, "%v: want between 100ms and 1m", s.PollInterval)
			}
		case "bin_dir":
			if s.BinDir, err = p.Str(v, f); err == nil && !filepath.IsAbs(s.BinDir) {
				err = p.Errf(v, f, "%q: want an absolute path", s.BinDir)
			}
		default:
			return p.Errf(k, f, "unknown key (want partition, account, qos, nodes, share, gflops_per_cpu, busy_watts_per_cpu, idle_watts_per_cpu, tasks_dir, poll_interval, bin_dir)")
		}
		return err
	})
	if err != nil {
		return s, err
	}
	if !sawGFLOPS {
		return s, p.Errf(mf.Slurm, "slurm.gflops_per_cpu", "missing: the speed of one CPU of the cluster's nodes, in GFLOPS")
	}
	if !sawBusy {
		return s, p.Errf(mf.Slurm, "slurm.busy_watts_per_cpu", "missing: the busy power of one CPU of the cluster's nodes, in watts")
	}
	if s.IdleWattsPerCPU > s.BusyWattsPerCPU {
		return s, p.Errf(mf.Slurm, "slurm.idle_watts_per_cpu", "%v is more than busy_watts_per_cpu %v", s.IdleWattsPerCPU, s.BusyWattsPerCPU)
	}
	return s, nil
}

// parseShare reads "50%" or a fraction in (0, 1].
func parseShare(p yamlfile.Parser, v *yaml.Node, f string) (float64, error) {
	if err := p.Scalar(v, f); err != nil {
		return 0, err
	}
	str := v.Value
	x, perr := strconv.ParseFloat(strings.TrimSuffix(str, "%"), 64)
	if strings.HasSuffix(str, "%") {
		x /= 100
	}
	if perr != nil || !(x > 0 && x <= 1) {
		return 0, p.Errf(v, f, "%q: want a percentage in (0%%, 100%%] or a fraction in (0, 1]", str)
	}
	return x, nil
}

// String names the settings for the log.
func (s Settings) String() string {
	return fmt.Sprintf("partition %q account %q qos %q share %g", s.Partition, s.Account, s.QoS, s.Share)
}
