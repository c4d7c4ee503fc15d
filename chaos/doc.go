// Package chaos is coopgrid's fault-injection harness (issue 7). Its tests
// start a federation of real `peer run` processes on loopback (the binary
// built from this repository, the process executor running /bin/sh
// tasks), drive a concurrent workload of submits, cancels and status reads
// through the HTTP API from several clients, inject faults chosen from a
// recorded seed (kill -9 of the leader or a follower and a restart from the
// data directory; SIGSTOP past the election and heartbeat timeouts, then
// SIGCONT; and, through each peer's test-only fault surface, started with
// `peer run --fault-injection`: network partitions, clock steps, a slow
// Raft store, and a full disk on a size-limited tmpfs), and then check
// that nothing was lost: every task ends, the
// peers agree on the state hash, energy balances, no task ran twice at
// once, and the client history is linearizable (porcupine). Once the
// peers are stopped it compares every executor's run journal with the
// ledger and replays every peer's Raft log with `peer verify`.
//
// The package has no non-test code. `go test ./chaos` runs the model's
// unit tests and one short smoke scenario; `make chaos` (COOPGRID_CHAOS=1)
// runs the whole fault matrix; `CHAOS_SEED=n make chaos` replays a seed;
// `-short` skips everything that starts processes.
package chaos
