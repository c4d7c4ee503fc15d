package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
)

// newRetentionCmd is `peer retention`: show the federation's retention
// rule, or vote for one.
func newRetentionCmd() *cobra.Command {
	var f clientFlags
	var after time.Duration
	var keep int64
	var none bool
	cmd := &cobra.Command{
		Use:   "retention [--after DURATION] [--keep N] [--none]",
		Short: "Show the federation's retention rule, or vote for one",
		Long: `Without flags, print the federation's retention rule (when a finished task
leaves the replicated state for the peers' history; docs/HISTORY.md) and the
votes pending. With --after and/or --keep, or --none (keep every task), cast
this organisation's vote for that rule: the rule changes when more than half
of the federation's organisations (removed ones left out) vote for the same
one. A new vote replaces this organisation's earlier one.

--json prints GET /v1/retention's answer.`,
		Example: "  peer retention --data /var/lib/coopgrid\n  peer retention --after 720h --data /var/lib/coopgrid",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			vote := cmd.Flags().Changed("after") || cmd.Flags().Changed("keep") || none
			if none && (cmd.Flags().Changed("after") || cmd.Flags().Changed("keep")) {
				return usageErr("--none votes for no rule: give it without --after or --keep")
			}
			if vote && !none && after == 0 && keep == 0 {
				return usageErr("--after 0 and --keep 0 is no rule: say --none")
			}
			req := api.RetentionRequest{AfterMs: after.Milliseconds(), Keep: keep}
			if err := api.ValidateRetention(req); err != nil {
				return usageErr("%s", err.(*api.Error).Message)
			}
			c, err := f.connect()
			if err != nil {
				return err
			}
			var v api.RetentionView
			if vote {
				v, err = c.VoteRetention(cmd.Context(), req)
			} else {
				v, err = c.Retention(cmd.Context())
			}
			if err != nil {
				return c.fail("retention", err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return printRetention(cmd.OutOrStdout(), v)
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&after, "after", 0, "vote: a finished task may leave this long after it ended")
	fl.Int64Var(&keep, "keep", 0, "vote: ... or while more than this many finished tasks remain")
	fl.BoolVar(&none, "none", false, "vote for no rule: every task is kept")
	addClientFlags(cmd, &f, true)
	return cmd
}

func ruleString(afterMs, keep int64) string {
	if afterMs == 0 && keep == 0 {
		return "none (every task is kept)"
	}
	s := ""
	if afterMs > 0 {
		s = "after " + (time.Duration(afterMs) * time.Millisecond).String()
	}
	if keep > 0 {
		if s != "" {
			s += ", or "
		}
		s += fmt.Sprintf("beyond %d finished tasks", keep)
	}
	return s
}

func printRetention(w io.Writer, v api.RetentionView) error {
	if _, err := fmt.Fprintln(w, "retention "+ruleString(v.AfterMs, v.Keep)); err != nil {
		return err
	}
	for _, p := range v.Votes {
		fmt.Fprintf(w, "  pending: %s votes for %s (entry %d)\n", p.Org, ruleString(p.AfterMs, p.Keep), p.Index)
	}
	if v.Note != "" {
		fmt.Fprintln(w, v.Note)
	}
	return nil
}
