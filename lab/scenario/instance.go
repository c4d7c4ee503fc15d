package scenario

import "github.com/coopgrid/coopgrid/policy"

// Instance is one concrete, fully resolved workload: the federation and every
// task with its size and submit time. A Scenario yields one Instance per run
// (the task sizes are drawn from the run's seed); the simulator consumes
// Instances and knows nothing of YAML.
type Instance struct {
	// Name of the scenario this instance came from.
	Name string
	// Orgs with their limits resolved to milliwatts.
	Orgs []policy.Org
	// Machines, each with its owner's index in Orgs.
	Machines []policy.Machine
	// IdleMilliW[i] is the optional idle draw of Machines[i] (0 when not
	// configured). It never enters the policy; the simulator reports it
	// separately.
	IdleMilliW []int64
	// Tasks in submission order (SubmitSeconds ascending, then index).
	Tasks []TaskSpec
}

// TaskSpec is one task of an instance.
type TaskSpec struct {
	ID            string
	Org           int
	SizeMFlop     int64
	SubmitSeconds float64
	// Request is what the task asks of a machine (the zero value: one CPU,
	// a whole one-slot machine) and Requirements what it requires of the
	// machine's attributes (docs/SCENARIOS.md).
	Request      policy.Resources
	Requirements []policy.Requirement
	// Executable is what owner policies see of the task (its argv[0]);
	// "" for a task any owner allows.
	Executable string
}
