package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/spf13/cobra"
)

func newInviteCmd() *cobra.Command {
	var (
		f    clientFlags
		peer string
		ttl  time.Duration
		out  string
	)
	cmd := &cobra.Command{
		Use:   "invite ORG [--peer PEER_ID] [--ttl 24h] [-o FILE]",
		Short: "Invite an organisation to join the federation",
		Long: `Issue an invitation for organisation ORG, signed with this peer's identity.
The invited organisation's administrator starts its peer with
peer run --bootstrap ADDRESS --invitation FILE|TOKEN. An invitation admits one
peer, once, before it expires (--ttl, default 24h, at most 30 days); with
--peer only that peer ID may use it (peer init prints it). Hand it over as
you would a password: whoever holds it, with the federation secret, joins as
ORG.`,
		Example: `  peer invite uni-b --data /var/lib/coopgrid -o uni-b.invitation
  peer invite uni-b --peer 12D3KooW… --ttl 2h`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			inv, err := c.Invite(cmd.Context(), api.InviteRequest{Org: args[0], Peer: peer, TTLSeconds: int64(ttl / time.Second)})
			if err != nil {
				return c.fail("invite", err)
			}
			if out != "" {
				if err := os.WriteFile(out, []byte(inv.Token+"\n"), 0o600); err != nil {
					return fmt.Errorf("write the invitation: %w", err)
				}
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), inv)
			}
			w := cmd.OutOrStdout()
			if out == "" {
				fmt.Fprintln(w, inv.Token)
				return nil
			}
			fmt.Fprintf(w, "invitation %s for %s written to %s, valid until %s\n", inv.ID, inv.Org, out,
				time.UnixMilli(inv.ExpiresMs).UTC().Format(time.RFC3339))
			return nil
		},
	}
	addClientFlags(cmd, &f, true)
	cmd.Flags().StringVar(&peer, "peer", "", "only this peer ID may use the invitation")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "validity (default 24h, at most 720h)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the token to this file (mode 0600) instead of printing it")
	return cmd
}

func newRemoveCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "remove ORG",
		Short: "Vote to remove another organisation from the federation",
		Long: `Record this organisation's vote to remove organisation ORG. No member
removes another on its own: ORG is removed once more than half of the
organisations not removed voted for it. Its peer is then taken out of the
Raft configuration, its machines are declared lost (their tasks queued
again), and its heartbeats and commands are refused. To leave yourself, use
peer leave.`,
		Example: `  peer remove uni-c --data /var/lib/coopgrid`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			v, err := c.VoteRemoval(cmd.Context(), api.RemovalRequest{Org: args[0]})
			if err != nil {
				return c.fail("remove", err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), v)
			}
			if v.Removed {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is removed from the federation\n", v.Org)
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout(), v.Note)
			return nil
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}

// readInvitation resolves --invitation: the file that holds a token, or
// the token itself (cmd/peer does not import consensus, which checks it).
func readInvitation(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if st, err := os.Stat(v); err == nil && st.Mode().IsRegular() {
		b, err := os.ReadFile(v)
		if err != nil {
			return "", usageErr("--invitation: %v", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if strings.ContainsAny(v, "/\\") {
		return "", usageErr("--invitation %s: no such file (and not a token)", v)
	}
	return v, nil
}
