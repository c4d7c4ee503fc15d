package slurm

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/executor"
)

// Node is one Slurm node as `scontrol show node -o` shows it.
type Node struct {
	Name        string
	CPUs        int64
	MemoryBytes int64 // RealMemory
	GPUs        int64 // gpu entries of Gres
	Features    []string
	Partitions  []string
	// State is Slurm's, e.g. IDLE, MIXED, ALLOCATED, DOWN, IDLE+DRAIN.
	State  string
	Reason string
}

// Available says whether the node can run jobs now: up (idle, mixed,
// allocated or completing), not drained or draining, not failing, not in
// maintenance, responding.
func (n Node) Available() bool {
	parts := strings.Split(strings.TrimSuffix(n.State, "*"), "+")
	switch parts[0] {
	case "IDLE", "MIXED", "ALLOCATED", "COMPLETING":
	default:
		return false
	}
	for _, flag := range parts[1:] {
		switch flag {
		case "DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "MAINT", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG":
			return false
		}
	}
	return !strings.HasSuffix(n.State, "*")
}

// nodes lists the cluster's nodes.
func (c cli) nodes(ctx context.Context) ([]Node, error) {
	out, err := c.run(ctx, nil, nil, "scontrol", "show", "node", "-o")
	if err != nil {
		return nil, fmt.Errorf("list the cluster's nodes: %w", err)
	}
	return parseNodes(out)
}

// parseNodes reads `scontrol show node -o`, one node a line.
func parseNodes(out string) ([]Node, error) {
	var ns []Node
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		kv := fields(line)
		n := Node{Name: kv["NodeName"], State: kv["State"], Reason: kv["Reason"]}
		if n.Name == "" || n.State == "" {
			return nil, fmt.Errorf("scontrol show node: a line without NodeName or State: %q", clip(line, 200))
		}
		var err error
		if n.CPUs, err = strconv.ParseInt(firstOf(kv, "CPUEfctv", "CPUTot"), 10, 64); err != nil {
			return nil, fmt.Errorf("scontrol show node %s: CPUTot: %w", n.Name, err)
		}
		if mib, err := strconv.ParseInt(kv["RealMemory"], 10, 64); err == nil && mib > 1 {
			n.MemoryBytes = mib << 20
		}
		n.GPUs = gpus(kv["Gres"])
		n.Features = list(firstOf(kv, "ActiveFeatures", "AvailableFeatures"))
		n.Partitions = list(kv["Partitions"])
		ns = append(ns, n)
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
	return ns, nil
}

func firstOf(kv map[string]string, keys ...string) string {
	for _, k := range keys {
		if v, ok := kv[k]; ok && v != "" {
			return v
		}
	}
	return ""
}

// list splits a comma list; "(null)" is empty.
func list(s string) []string {
	if s == "" || s == "(null)" {
		return nil
	}
	return strings.Split(s, ",")
}

// gpus counts the GPUs of a Gres field: "gpu:2", "gpu:a100:4(S:0-1)",
// "gpu:a100:2,gpu:v100:1,shard:8".
func gpus(gres string) int64 {
	var total int64
	for _, g := range list(gres) {
		g, _, _ = strings.Cut(g, "(")
		parts := strings.Split(g, ":")
		if parts[0] != "gpu" || len(parts) < 2 {
			continue
		}
		if n, err := strconv.ParseInt(parts[len(parts)-1], 10, 64); err == nil && n > 0 {
			total += n
		}
	}
	return total
}

// Machines turns the cluster's nodes into the machines this peer offers:
// the settings' nodes (every node of the partition by default), with the
// settings' share of each node's CPUs and memory, its GPUs, its features
// as labels, speed and power per CPU offered. Nodes whose names cannot
// name a machine are left out and named in skipped.
func Machines(nodes []Node, s Settings) (ms []executor.MachineConfig, skipped []string, err error) {
	for _, n := range nodes {
		if len(s.Nodes) > 0 && !slices.Contains(s.Nodes, n.Name) {
			continue
		}
		if s.Partition != "" && !slices.Contains(n.Partitions, s.Partition) {
			if len(s.Nodes) > 0 {
				return nil, nil, fmt.Errorf("node %s is not in partition %s", n.Name, s.Partition)
			}
			continue
		}
		if !executor.ValidMachineName(n.Name) {
			skipped = append(skipped, n.Name+" (not a valid machine name)")
			continue
		}
		cpus := max(1, int64(math.Floor(float64(n.CPUs)*s.Share)))
		m := executor.MachineConfig{
			Name:        n.Name,
			CPUs:        cpus,
			MemoryBytes: int64(math.Floor(float64(n.MemoryBytes) * s.Share)),
			GPUs:        n.GPUs,
			GFLOPS:      s.GFLOPSPerCPU * float64(cpus),
			BusyWatts:   s.BusyWattsPerCPU * float64(cpus),
			IdleWatts:   s.IdleWattsPerCPU * float64(cpus),
		}
		for _, f := range n.Features {
			if len(m.Labels) < 64 && f != "" {
				m.Labels = append(m.Labels, f)
			}
		}
		if err := m.Validate(); err != nil {
			return nil, nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		ms = append(ms, m)
	}
	for _, want := range s.Nodes {
		if !slices.ContainsFunc(ms, func(m executor.MachineConfig) bool { return m.Name == want }) &&
			!slices.ContainsFunc(nodes, func(n Node) bool { return n.Name == want }) {
			return nil, nil, fmt.Errorf("node %s: the cluster has no such node", want)
		}
	}
	if len(ms) == 0 {
		return nil, skipped, fmt.Errorf("no node of the cluster to offer (partition %q, nodes %v)", s.Partition, s.Nodes)
	}
	return ms, skipped, nil
}

// Discover lists the cluster's nodes and derives the machines to offer.
func Discover(ctx context.Context, s Settings) ([]executor.MachineConfig, []string, error) {
	c := newCLI(s)
	nodes, err := c.nodes(ctx)
	if err != nil {
		return nil, nil, err
	}
	return Machines(nodes, s)
}
