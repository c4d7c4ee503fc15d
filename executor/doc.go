// Package executor runs the tasks that the replicated log places on this
// peer's machines: as real processes (ProcessExecutor) or simulated from
// their size and the machine's speed (SimExecutor).
//
// The package knows nothing of the ledger, of consensus or of the network.
// The daemon maps a ledger task to a TaskSpec, calls Start with the machine
// the log chose, and reports each Result back through the log. Both
// executors satisfy Executor.
//
// # Contract
//
// Start returns an error only when no Result will ever be delivered for the
// call: the executor is closed, the machine is unknown or busy, a task
// with the same ID is already running, or (process executor with a run
// journal) the run could not be journaled, in which case nothing of it ran. Anything wrong with the task itself
// (a malformed spec, an executable the machine's owner does not allow, a
// run-as user that cannot be used, a process that fails to start) is
// reported as a Result with a stable Reason code, so the daemon has one path
// for task failures. Every accepted Start yields exactly one Result.
//
// Stop asks a running task to end: SIGTERM to its process group, a grace
// period in which it may write a final checkpoint under $CHECKPOINT_DIR,
// then SIGKILL to the group. It returns once the task has ended and its
// Result is queued (or when its context ends).
//
// Results are queued without bound, so a producer never blocks on a slow
// consumer and Stop never waits for the consumer to read.
//
// # Units
//
// As in the ledger: computing power in MFLOPS (1 GFLOPS = 1000), work in
// MFlop, power in milliwatts, energy in millijoules. Machine configs keep
// the human units (GFLOPS, watts) and convert once with round(x·1000).
//
// docs/EXECUTOR.md describes the directory layout, the environment given to
// tasks, the owner's policy and the limits of the isolation.
package executor
