package consensus

import (
	"errors"

	"github.com/coopgrid/coopgrid/p2p"
	"github.com/hashicorp/raft"
)

// Error codes of the consensus layer. Errors are *p2p.Error values, the same
// type whether they were raised here or by the leader across a stream, so a
// caller matches on p2p.Code(err) in both cases. A command that reached the
// log and was rejected by the ledger is not an error: Propose returns its
// ledger.Result with Result.Err set.
const (
	// CodeNotLeader: this peer is not the leader (the command was not
	// appended; it is safe to send it to the leader).
	CodeNotLeader = "not_leader"
	// CodeNoLeader: no leader became known in time (not appended).
	CodeNoLeader = "no_leader"
	// CodeNoQuorum: this node has known no leader for LeaderWaitTimeout,
	// many election timeouts: it reaches no majority of the voters (they
	// are down, or it is cut off from them). Not appended; nothing is
	// until a majority is back.
	CodeNoQuorum = "no_quorum"
	// CodeOutcomeUnknown: the command may or may not have been committed
	// (leadership was lost or the connection broke after it was sent).
	// Read the state before retrying a non-idempotent command.
	CodeOutcomeUnknown = "outcome_unknown"
	// CodeBadCommand: the bytes are not a well-formed ledger command.
	CodeBadCommand = "bad_command"
	// CodeForbidden: the command claims another peer's identity, or is
	// something only the leader itself may propose.
	CodeForbidden = "forbidden"
	// CodeShutdown: the node is shut down.
	CodeShutdown = "shutdown"
	// CodeTimeout: the context ended before the operation completed.
	CodeTimeout = p2p.CodeTimeout
	// CodeLastMember: the only voter cannot leave its own cluster.
	CodeLastMember = "last_member"
	// CodeNotMember: the requester (or the peer named) is not in the
	// cluster's configuration.
	CodeNotMember = "not_member"
	// CodeMembership: raft refused a configuration change.
	CodeMembership = "membership"
	// CodeHalted: this peer stopped applying the log at an entry of a newer
	// command version than it applies (upgrade it).
	CodeHalted = "halted"
)

func errorf(code, format string, args ...any) *p2p.Error {
	return p2p.Errorf(code, format, args...)
}

// Retryable says a failed operation certainly or possibly did not take
// effect for a reason that passes (no leader, a leader change, a timeout,
// the network): trying again later may succeed. The outcome may be unknown
// (CodeOutcomeUnknown, CodeTimeout), so only a command that is harmless to
// commit twice (the ledger's replay guard, or a state check that rejects
// the second) may be sent again blindly. A ledger rejection or a refusal
// (CodeForbidden, CodeBadCommand, ...) is an answer: not retryable.
func Retryable(err error) bool {
	var pe *p2p.Error
	if errors.As(err, &pe) {
		switch pe.Code {
		case CodeNoLeader, CodeNoQuorum, CodeNotLeader, CodeOutcomeUnknown, CodeTimeout, p2p.CodeUnavailable, CodeAdmissionPaced:
			return true
		}
		return false
	}
	return errors.Is(err, p2p.ErrUnreachable)
}

// certainlyNotApplied says the operation certainly did not take effect
// (it never reached a leader's log) and may be sent again to a (new) leader
// whatever it is.
func certainlyNotApplied(err error) bool {
	switch p2p.Code(err) {
	case CodeNotLeader, CodeNoLeader, CodeNoQuorum:
		return true
	}
	return errors.Is(err, p2p.ErrUnreachable)
}

// raftError maps a raft future's error to a coded error; errors raft does
// not classify get fallback.
func raftError(err error, what, fallback string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before the entry was appended.
		return errorf(CodeNotLeader, "%s: %v", what, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return errorf(CodeOutcomeUnknown, "%s: %v", what, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return errorf(CodeShutdown, "%s: %v", what, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return errorf(CodeTimeout, "%s: %v", what, err)
	}
	return errorf(fallback, "%s: %v", what, err)
}
