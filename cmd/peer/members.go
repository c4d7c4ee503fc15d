package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
)

func newMembersCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the federation's Raft members with their reachability and last contact",
		Long: `List every member of the Raft configuration: its peer ID, organisation,
suffrage (voter or nonvoter), whether it leads, whether the leader reaches it,
and how long ago the leader last heard from it (the leader's autopilot asks
every member for its Raft stats every maintenance interval, 2 s by default).
A follower asks the leader; with no leader answering, the peer prints its own
view (connected or not) and says so.

A voter the leader has not heard from for dead_voter_after (config.yaml,
30 s with the lan preset) is demoted to non-voter and a healthy non-voter is
promoted in its place, never leaving fewer than three voters
(docs/OPERATIONS.md, "Members").

--json prints {"leader","observer","note","voters","voters_reachable",
"members":[{"id","org","suffrage","leader","reachable","last_contact_ms"}]}
(last_contact_ms: -1 when unknown).`,
		Example: `  peer members --data /var/lib/coopgrid
  peer members remove 12D3KooW… --data /var/lib/coopgrid`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			v, err := c.Members(cmd.Context())
			if err != nil {
				return c.fail("members", err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return printMembers(cmd.OutOrStdout(), v)
		},
	}
	addClientFlags(cmd, &f, true)
	cmd.AddCommand(newMembersRemoveCmd())
	return cmd
}

func newMembersRemoveCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "remove PEER_ID",
		Short: "Vote to remove another organisation's peer from the federation",
		Long: `Ask for the removal of member PEER_ID (peer members lists them). Who may:

  - a peer's own organisation, by leaving: naming this peer is refused, use
    peer leave (it stops this peer's tasks and releases its machines first);
  - for another organisation's peer, the federation: this records this
    organisation's vote in the ledger (as peer remove ORG does), and the peer
    is removed once more than half of the organisations not removed voted
    for it. Its machines are then declared lost and its tasks queued again.

The answer says whether the peer is removed, or how many votes are recorded.`,
		Example: `  peer members remove 12D3KooWQx… --data /var/lib/coopgrid`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			v, err := c.RemoveMember(cmd.Context(), args[0])
			if err != nil {
				return c.fail("members remove", err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), v)
			}
			who := v.ID
			if v.Org != "" {
				who += " (" + v.Org + ")"
			}
			if v.Removed {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is removed from the federation\n", who)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "vote recorded to remove %s: %s\n", who, orDash(v.Note))
			return nil
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}

func printMembers(w io.Writer, v api.MembersView) error {
	if v.Note != "" {
		fmt.Fprintf(w, "note: %s\n", v.Note)
	}
	fmt.Fprintf(w, "voters reachable: %d of %d (a leader needs %d)\n\n", v.VotersReachable, v.Voters, v.Voters/2+1)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tORG\tSUFFRAGE\tLEADER\tREACHABLE\tLAST CONTACT")
	for _, m := range v.Members {
		last := "unknown"
		if m.LastContactMs >= 0 {
			last = (time.Duration(m.LastContactMs) * time.Millisecond).Round(100*time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, orDash(m.Org), m.Suffrage, yesNo(m.Leader), yesNo(m.Reachable), last)
	}
	return tw.Flush()
}
