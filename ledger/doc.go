// Package ledger is the replicated state machine of the federation: the
// organisations, their machines, the tasks, the allocations the scheduling
// policy made and the per-organisation energy accounts, together with the
// commands that change them.
//
// The ledger knows nothing of Raft or of the network. The consensus package
// wraps a *Ledger in a raft.FSM adapter: it feeds every committed log entry
// to Apply, serves snapshots through WriteSnapshot and Restore, and builds
// the leader's scheduling view with PolicyView. This mirrors the FSM
// separation of hashicorp/raft, so the ledger is tested on its own, with
// real encodings and no network.
//
// # Concurrency
//
// A Ledger is NOT safe for concurrent use. Apply, Restore and every accessor
// read or write the same maps without locking; the consensus adapter guards
// the ledger with a sync.RWMutex (write lock for Apply and Restore, read lock
// for WriteSnapshot, Hash, PolicyView and the accessors). Accessors return
// deep copies, so what they return stays valid after the lock is released.
//
// # Determinism
//
// Apply is a pure function of the current state, the log index and the
// command bytes: no clock (times come from the command's AtMs, stamped by the
// proposer), no randomness, no map iteration order leaking into the state or
// into Result. Two ledgers fed the same log have the same Hash at every
// index.
//
// # Validation
//
// Apply validates a command completely against the current state before it
// mutates anything, so an invalid command changes nothing (the state hash is
// unchanged) and its Result carries an *Error with a stable Code. A
// decisions batch is the one exception to all-or-nothing, on purpose: see
// Decisions.
//
// # Units
//
// As in package policy, quantities are integers so that sums are exact:
// computing power in MFLOPS, work in MFlop, power in milliwatts, energy in
// millijoules and times in unix milliseconds.
package ledger
