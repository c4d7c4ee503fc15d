package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
)

// newJobPolicyCmd is `peer job-policy [NAME]`: show the federation's job
// policy, or vote for NAME.
func newJobPolicyCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "job-policy [NAME]",
		Short: "Show the federation's job policy, or vote for one",
		Long: `Without NAME, print the federation's job policy (how its queue of parallel
jobs is served: ehosep, fcfs, easy, conservative or ehosep-easy; docs/POLICY.md
§8) and the votes pending. A vote for ehosep-easy is a command of version 3,
committed once every member runs a build that applies it. With NAME, cast this organisation's vote for it: the policy
changes when more than half of the federation's organisations (removed ones
left out) vote for the same one. A new vote replaces this organisation's
earlier one. The vote is recorded in the ledger; peer status shows it.

--json prints the policy as GET /v1/status's job_policy.`,
		Example: "  peer job-policy --data /var/lib/coopgrid\n  peer job-policy easy --data /var/lib/coopgrid",
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			var v api.JobPolicyView
			if len(args) == 0 {
				st, err := c.Status(cmd.Context())
				if err != nil {
					return c.fail("job-policy", err)
				}
				if st.JobPolicy == nil {
					return fmt.Errorf("job-policy: the peer did not say (an older build?)")
				}
				v = *st.JobPolicy
			} else {
				req := api.JobPolicyRequest{Policy: args[0]}
				if err := api.ValidateJobPolicy(req); err != nil {
					return usageErr("%s", err.(*api.Error).Message)
				}
				if v, err = c.VoteJobPolicy(cmd.Context(), req); err != nil {
					return c.fail("job-policy "+args[0], err)
				}
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return printJobPolicy(cmd.OutOrStdout(), v)
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}

// printJobPolicy prints the policy in force, the decision, the pending
// votes and the note of a vote just cast.
func printJobPolicy(w io.Writer, v api.JobPolicyView) error {
	line := "job policy " + v.Policy
	if v.Index == 0 {
		line += " (the default: never voted)"
	} else {
		line += fmt.Sprintf(" (entry %d, voted by %s)", v.Index, strings.Join(v.Voters, ", "))
	}
	if _, err := fmt.Fprintln(w, line); err != nil {
		return err
	}
	for _, p := range v.Votes {
		fmt.Fprintf(w, "  pending: %s votes for %s (entry %d)\n", p.Org, p.Policy, p.Index)
	}
	if v.Note != "" {
		fmt.Fprintln(w, v.Note)
	}
	return nil
}
