package leader

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// CodeVersionUnsupported: the command is of a command version that some
// member of the federation does not apply yet (Admit). Not appended;
// upgrade that member first.
const CodeVersionUnsupported = "version_unsupported"

// Admit is consensus' admission hook (consensus.Config.Admit): the rules a
// command must pass, on top of the ledger's own, before it is appended.
// consensus has already checked that the command acts as proposer (this
// peer for its own proposals, the authenticated sender of a forwarded one);
// state is the local ledger under its read lock.
//
//   - Decisions and schedule triggers come only from the leader's
//     scheduling pass, which appends them itself (Replica.AppendAsLeader)
//     without admission: a proposed one is refused, from any peer, this
//     one included.
//
//   - The ledger lets any registered peer declare a machine lost; only the
//     leader (which watches heartbeats) may do so for another
//     organisation's machine, so a forwarded declaration about another
//     organisation's machine is refused.
//
//   - A command of a version above 1 (a kind or field added since,
//     ledger/version.go) is refused while some member of the Raft
//     configuration, voter or not, does not announce that it applies it
//     (CodeVersionUnsupported): that member would stop applying the log
//     at it. The commands the leader appends itself (its scheduling pass,
//     its retention duty's forget_tasks, of version 2) pass the same rule
//     before AppendAsLeader (appendOwn, ownversion.go).
//
//   - A submission with a soft-deadline task that no machine can finish
//     in time is refused (CodeDeadlineUnmeetable, deadline.go).
//
// Refusals are *p2p.Error with consensus.CodeForbidden,
// CodeVersionUnsupported or CodeDeadlineUnmeetable.
func (l *Leader) Admit(proposer peer.ID, c ledger.Command, state *ledger.Ledger) error {
	if c.LeaderOnly() {
		return p2p.Errorf(consensus.CodeForbidden, "%s commands are proposed only by the leader's scheduling loop", c.Kind())
	}
	if c.MachineLost != nil && proposer != l.cfg.Self {
		if m, ok := state.Machine(c.MachineLost.Machine); ok && m.Org != "" && m.Org != c.Org {
			return p2p.Errorf(consensus.CodeForbidden, "only the leader may declare another organisation's machine %q lost", c.MachineLost.Machine)
		}
	}
	if c.V > ledger.CommandVersion {
		if err := l.admitVersion(c); err != nil {
			return err
		}
	}
	if c.SubmitTasks != nil {
		return l.admitDeadlines(c, state)
	}
	return nil
}

// admitVersion refuses c if a member does not apply its version.
func (l *Leader) admitVersion(c ledger.Command) error {
	if l.cfg.Members == nil {
		return nil
	}
	members, err := l.cfg.Members()
	if err != nil {
		return p2p.Errorf(CodeVersionUnsupported, "command version %d: cannot tell which versions the members apply: %v", c.V, err)
	}
	for _, m := range members {
		if m.ID == l.cfg.Self {
			continue
		}
		if v := l.memberVersion(m.ID); v < c.V {
			_, field := ledger.RequiredVersion(&c)
			return p2p.Errorf(CodeVersionUnsupported, "%s (%s) is command version %d, and member %s applies versions up to %d: upgrade every member before using it",
				c.Kind(), field, c.V, m.ID, v)
		}
	}
	return nil
}

// memberVersion is the command version member id announced, the first
// version when it announced none (a build from before announcements) or
// this leader has not heard from it since it started.
func (l *Leader) memberVersion(id peer.ID) int {
	if l.cfg.Agents == nil {
		return ledger.CommandVersion
	}
	return AnnouncedVersion(l.cfg.Agents.AgentVersion(id))
}

// Agents says what each peer announced when it connected (*p2p.Host).
type Agents interface {
	AgentVersion(id peer.ID) string
}

// commandsToken precedes the command version in a peer's agent.
const commandsToken = "commands/"

// UserAgent is what a peer announces to every peer it connects to
// (p2p.Config.UserAgent): its build and the highest command version its
// ledger applies, "coopgrid/<build> commands/<N>".
func UserAgent(build string) string {
	if build == "" {
		build = "dev"
	}
	return fmt.Sprintf("coopgrid/%s %s%d", build, commandsToken, ledger.MaxCommandVersion())
}

// AnnouncedVersion reads the command version out of a peer's agent
// (UserAgent); the first version when there is none.
func AnnouncedVersion(agent string) int {
	for _, f := range strings.Fields(agent) {
		if n, err := strconv.Atoi(strings.TrimPrefix(f, commandsToken)); err == nil && strings.HasPrefix(f, commandsToken) && n >= ledger.CommandVersion {
			return n
		}
	}
	return ledger.CommandVersion
}
