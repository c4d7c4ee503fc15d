package runner

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/ledger"
)

// A gang's parts (docs/POLICY.md §8, "Gangs on real peers") each run as
// an ordinary task on one machine of this peer; what makes them one
// parallel job to the program is what GangEnv gives each part: the hosts
// of every part, its own rank, and a hostfile in Open MPI's format. The
// start path (gangStart) adds it to the part's environment and work
// directory; GangEnv is pure so that the format is tested on its own.

// Environment variables of a gang part.
const (
	// EnvGangHosts lists every part's host, in part order, comma-separated.
	EnvGangHosts = "COOPGRID_HOSTS"
	// EnvGangRank is this part's index in EnvGangHosts, from 0.
	EnvGangRank = "COOPGRID_GANG_RANK"
	// EnvGangSize is the number of parts.
	EnvGangSize = "COOPGRID_GANG_SIZE"
	// EnvGangHostfile is the path of the hostfile, in the task directory.
	EnvGangHostfile = "COOPGRID_HOSTFILE"
	// GangHostfileName is the hostfile's name in the task directory.
	GangHostfileName = "hostfile"
)

// GangPart is one part of a gang as its process sees it: the host it runs
// on and the CPUs it holds there (its slots).
type GangPart struct {
	Host string
	CPUs int64
}

// GangEnv returns the environment of part rank of parts, whose hostfile is
// at hostfile, and the hostfile's content: one "HOST slots=N" line per
// part, in part order. A host name must be non-empty and hold no space,
// comma or newline (it is a word of both formats).
func GangEnv(parts []GangPart, rank int, hostfile string) (env map[string]string, content []byte, err error) {
	if len(parts) < 2 {
		return nil, nil, fmt.Errorf("gang of %d parts: want at least 2", len(parts))
	}
	if rank < 0 || rank >= len(parts) {
		return nil, nil, fmt.Errorf("rank %d out of range [0, %d)", rank, len(parts))
	}
	hosts := make([]string, len(parts))
	var b strings.Builder
	for i, p := range parts {
		if p.Host == "" || strings.ContainsAny(p.Host, " \t\r\n,") {
			return nil, nil, fmt.Errorf("part %d: host %q: want a name without spaces or commas", i, p.Host)
		}
		if p.CPUs < 1 {
			return nil, nil, fmt.Errorf("part %d on %s: %d cpus, want at least 1", i, p.Host, p.CPUs)
		}
		hosts[i] = p.Host
		fmt.Fprintf(&b, "%s slots=%d\n", p.Host, p.CPUs)
	}
	env = map[string]string{
		EnvGangHosts:    strings.Join(hosts, ","),
		EnvGangRank:     strconv.Itoa(rank),
		EnvGangSize:     strconv.Itoa(len(parts)),
		EnvGangHostfile: hostfile,
	}
	return env, []byte(b.String()), nil
}

// gangStart is what a gang part's start adds: the gang's environment
// (GangEnv) and the hostfile among the inputs (a copy of inputs is
// returned). The parts' machines are the local ledger's; each is reached
// by its host (Config.Hosts, else its name).
func (b *bridge) gangStart(t ledger.Task, inputs map[string][]byte) (map[string]string, map[string][]byte, error) {
	var (
		machines []string
		ok       bool
	)
	b.cfg.Ledger.View(func(l *ledger.Ledger) { machines, ok = l.GangMachines(t.ID) })
	if !ok {
		return nil, nil, fmt.Errorf("a part of gang %s is not placed", t.Spec.Gang.ID)
	}
	parts := make([]GangPart, len(machines))
	for i, id := range machines {
		org, name, _ := strings.Cut(id, "/")
		host := name
		if h := b.cfg.Hosts[name]; h != "" && org == b.cfg.Org {
			host = h
		}
		parts[i] = GangPart{Host: host, CPUs: max(t.Spec.CPUs, 1)}
	}
	env, hostfile, err := GangEnv(parts, t.Spec.Gang.Rank, "./"+GangHostfileName)
	if err != nil {
		return nil, nil, err
	}
	in := make(map[string][]byte, len(inputs)+1)
	for k, v := range inputs {
		in[k] = v
	}
	in[GangHostfileName] = hostfile
	return env, in, nil
}
