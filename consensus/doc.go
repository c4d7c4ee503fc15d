// Package consensus replicates the federation's ledger with Raft over
// libp2p. It is generic replication: the leader's duties (the scheduling
// pass, lost-machine detection, the admission rules for commands) live in
// package leader and run from the hooks of Config (Admit, OnLeadership,
// OnApply).
//
// # Pieces
//
//   - hashicorp/raft with raft-boltdb/v2 as log and stable store (DataDir/
//     raft.db), a raft.LogCache in front of it, and a raft.FileSnapshotStore
//     (DataDir/snapshots). Raft RPCs travel over libp2p streams
//     (go-libp2p-raft); the Raft server ID and address are the peer ID, and
//     libp2p finds the peer from its peerstore (fed by the p2p package's
//     known-peers file and by the membership exchange at join). Only
//     members replicate: the transport accepts a Raft RPC only from a peer
//     in the configuration (a joiner: from those its join named), checked
//     against the libp2p-authenticated sender before Raft sees it
//     (gate.go, transport.go; docs/SECURITY.md).
//   - An FSM adapter over *ledger.Ledger, guarded by a sync.RWMutex: Apply
//     and Restore write, View and the snapshot read. Snapshots serialise the
//     ledger under the read lock; Restore builds a new ledger aside and swaps
//     it in only if it restores cleanly.
//   - Writes: Propose commits a ledger command on the leader, or forwards it
//     over ProtoPropose to the leader, which checks that the command acts as
//     the authenticated peer that sent it (Command.Peer) and asks
//     Config.Admit, then its ledger's dry run (ledger.Check), before
//     appending it: a command the ledger would reject never reaches the
//     log (dryrun.go). AppendAsLeader is the leader's own
//     path, without admission, for the duties that run only while it leads.
//   - Reads: View is local and possibly stale; ReadConsistent is linearizable
//     (barrier and leadership check on the leader, read-index wait on a
//     follower).
//   - Membership: Bootstrap (first peer), Join through any member (a
//     follower forwards to the leader), voters up to MaxVoters then
//     non-voters, promotion of a non-voter when a voter goes, Leave with
//     leadership transfer, RemovePeer; dead voters demoted and dead
//     non-voters taken out (voters.go); MembersHealth, the leader's view of
//     every member (members.go); Recover, offline, for a federation that
//     lost its majority (recover.go).
//   - Notifications: Config.OnLeadership runs while this node leads (its
//     context is cancelled the moment Raft reports the loss of leadership,
//     and the node waits for it to return); Config.OnApply sees every
//     applied command in log order, Config.OnRestore every snapshot that
//     replaced the state.
//   - Subscriptions: the executor of a peer receives the committed starts and
//     stops for its organisation's machines.
//
// # Errors
//
// Errors carry stable codes (CodeNotLeader, CodeOutcomeUnknown, ...) as
// *p2p.Error values, both when raised locally and when returned by the
// leader over a stream: match with p2p.Code(err). A command the ledger
// rejected is not an error; its ledger.Result carries the reason.
//
// # Timeouts
//
// DefaultConfig uses LAN timeouts (heartbeat and election 400 ms, lease
// 300 ms): a dead leader is replaced in well under 1.5 s. WANConfig raises
// them for peers far apart.
package consensus
