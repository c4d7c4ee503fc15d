package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
)

func newHistoryCmd() *cobra.Command {
	var f clientFlags
	var q api.HistoryQuery
	var states []string
	var since, until string
	var all bool
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List this organisation's finished tasks that left the replicated state (like sacct)",
		Long: `List the finished tasks the federation's retention rule took out of the
replicated state (docs/HISTORY.md), as this peer's history store keeps them:
this organisation's only (another organisation's history is on its own peer).
Tasks still in the state are in ` + "`peer tasks`" + `.

Filters: --job NAME, --state done,failed,cancelled, --since and --until
(when the task ended: RFC 3339 such as 2026-11-26T10:00:00Z, or a date
2026-11-26). Pages hold --limit records (default 100) in submit order; the
last line names the --after cursor of the next page, or --all fetches every
page.

--json prints {"records":[…],"next":N}: each record is the task in detail,
as ` + "`peer task --json`" + ` prints it, with "forgotten_index" (the log index of
the forget_tasks that removed it); "next" is the next page's cursor, absent
on the last page.`,
		Example: `  peer history --data /var/lib/coopgrid
  peer history --data /var/lib/coopgrid --job sweep --state failed --since 2026-11-01 --json
  peer history --data /var/lib/coopgrid --limit 1000 --after 52311`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q.States = api.SplitList(states)
			var err error
			if q.FromMs, err = timeFlag("since", since, false); err != nil {
				return err
			}
			if q.ToMs, err = timeFlag("until", until, true); err != nil {
				return err
			}
			if err := api.ValidateHistoryQuery(q); err != nil {
				return usageErr("%s", strings.TrimPrefix(err.Error(), api.CodeBadRequest+": "))
			}
			c, err := f.connect()
			if err != nil {
				return err
			}
			var out api.HistoryPage
			for {
				p, err := c.History(cmd.Context(), q)
				if err != nil {
					return c.fail("history", err)
				}
				out.Records = append(out.Records, p.Records...)
				out.Next = p.Next
				if !all || p.Next == 0 {
					break
				}
				q.After = p.Next
			}
			if out.Records == nil {
				out.Records = []api.HistoryRecord{}
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), out)
			}
			return printHistory(cmd.OutOrStdout(), out)
		},
	}
	addClientFlags(cmd, &f, true)
	fl := cmd.Flags()
	fl.StringVar(&q.Org, "org", "", "the organisation (only this peer's own is kept here)")
	fl.StringVar(&q.Job, "job", "", "only the tasks submitted in the job of this name")
	fl.StringSliceVar(&states, "state", nil, "only tasks that ended in these states: done, failed, cancelled")
	fl.StringVar(&since, "since", "", "only tasks that ended at or after this time (RFC 3339 or YYYY-MM-DD)")
	fl.StringVar(&until, "until", "", "only tasks that ended at or before this time (RFC 3339, or YYYY-MM-DD: the whole day)")
	fl.IntVar(&q.Limit, "limit", api.DefaultHistoryLimit, fmt.Sprintf("records per page (1 to %d)", api.MaxHistoryLimit))
	fl.Uint64Var(&q.After, "after", 0, "the cursor of the page to fetch (printed after the previous page)")
	fl.BoolVar(&all, "all", false, "fetch every page")
	return cmd
}

// timeFlag reads --since/--until as Unix ms (0 when empty). A bare date
// is its day's start, or for the end of a range its last millisecond.
func timeFlag(name, v string, end bool) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UnixMilli(), nil
	}
	t, err := time.ParseInLocation(time.DateOnly, v, time.UTC)
	if err != nil {
		return 0, usageErr("--%s %q: want RFC 3339 (2026-11-26T10:00:00Z) or a date (2026-11-26)", name, v)
	}
	if end {
		t = t.Add(24*time.Hour - time.Millisecond)
	}
	return t.UnixMilli(), nil
}

func printHistory(w io.Writer, p api.HistoryPage) error {
	if len(p.Records) == 0 {
		fmt.Fprintln(w, "no finished tasks in the history")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tJOB\tSTATE\tMACHINE\tATTEMPTS\tEXIT\tGFLOP\tENERGY_J\tSUBMITTED\tENDED")
	for _, r := range p.Records {
		var joules float64
		for _, s := range r.Segments {
			joules += s.EnergyJ
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, orDash(r.Name), orDash(r.Job), r.State,
			orDash(r.Machine), r.Attempts, exitStr(r.TaskView), num(r.SizeGFlop), num(joules), when(r.SubmittedMs), when(r.EndedMs))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.Next != 0 {
		fmt.Fprintf(w, "more: --after %d\n", p.Next)
	}
	return nil
}
