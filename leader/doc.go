// Package leader owns every duty of the federation's Raft leader, started
// in one place when this peer becomes leader and stopped in one place when
// it stops leading (Nomad's establishLeadership and revokeLeadership):
//
//   - the scheduling pass (schedule.go): woken by applied commands that may
//     change what the policy decides and by a periodic tick; takes a view of
//     the ledger (after a barrier at the start of its term), runs the
//     configured policy and commits all decisions of a pass as one log
//     entry. The ledger re-validates each decision, so a pass decided on a
//     stale view loses decisions but never breaks an invariant, and a
//     decision committed twice (an old leader's pass racing a new leader's)
//     is rejected as stale. On a federation whose peers compute the passes
//     (ledger.Scheduling in its rules) it commits a schedule trigger
//     instead, when the same pass run on its own view decides something,
//     and every peer's Apply computes and applies the pass;
//   - lost-machine detection (lost.go): a machine that is up in the ledger
//     and silent on the gossip heartbeats for the timeout is declared lost;
//   - retention (retain.go): on a federation with a retention rule, the
//     finished tasks the rule lets go are forgotten by a forget_tasks the
//     leader appends (docs/HISTORY.md);
//   - command admission (admit.go): the rules a command must pass before
//     the leader appends it, on top of the ledger's own validation.
//
// consensus calls Leader.Establish from its leadership callback with a
// context cancelled the moment leadership is lost, and Leader.Admit and
// Leader.Applied from its admission and apply hooks. The package reaches
// the replicated log and the heartbeats only through the small interfaces
// it defines (Replica, Liveness).
package leader
