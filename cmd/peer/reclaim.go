package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
)

// newReclaimCmd is `peer machines reclaim NAME` (reclaim true) or
// `release NAME`.
func newReclaimCmd(reclaim bool) *cobra.Command {
	var f clientFlags
	use, short, long := "reclaim NAME", "Take back one of this organisation's opportunistic machines: its grid tasks are checkpointed and leave",
		`Take back an opportunistic machine (opportunistic: true in the machines file)
for its local user: the federation places nothing on it until it is released,
and the grid tasks it holds go back to the queue; a running one is stopped as
a preempted one is (checkpointed first when its job is checkpointable) and
resumes on another machine. The time until the release counts as the
machine's down time, and the reclaim as an interruption in its MTBF (peer
machines). NAME is the machine's name in the machines file, or its ID
ORG/NAME; only the machine's own organisation may reclaim it, and only a
machine registered opportunistic. Reclaiming a reclaimed machine changes
nothing.

--json prints the machine as peer machines --json does.`
	if !reclaim {
		use, short, long = "release NAME", "Offer a reclaimed opportunistic machine to the federation again",
			`Offer a machine taken back with peer machines reclaim to the federation again:
the leader may place work on it from its next scheduling pass. Releasing a
machine that is not reclaimed changes nothing.

--json prints the machine as peer machines --json does.`
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: "  peer machines " + use[:len(use)-len(" NAME")] + " desk-12 --data /var/lib/coopgrid",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.ReclaimRequest{Machine: args[0], Reclaimed: reclaim}
			if err := api.ValidateReclaim(req); err != nil {
				return usageErr("%s", err.(*api.Error).Message)
			}
			c, err := f.connect()
			if err != nil {
				return err
			}
			m, err := c.ReclaimMachine(cmd.Context(), req)
			if err != nil {
				return c.fail(cmd.Name()+" "+args[0], err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), m)
			}
			if m.Reclaimed {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s reclaimed: no grid work until peer machines release %s\n", m.ID, m.ID)
			} else {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s released: the federation may place work on it again\n", m.ID)
			}
			return err
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}

// stabilityCells are a machine's MTBF, failures (losses+reclaims) and
// availability columns of peer machines.
func stabilityCells(m api.MachineView) string {
	s := m.Stability
	if s == nil {
		return "-\t-\t-"
	}
	fails := strconv.FormatInt(s.Failures, 10)
	if s.Reclaims > 0 {
		fails += "+" + strconv.FormatInt(s.Reclaims, 10) + "r"
	}
	return fmt.Sprintf("%s\t%s\t%.1f%%", shortDuration(s.MTBFMs), fails, s.Availability*100)
}

// shortDuration prints ms as 3d4h, 2h5m, 4m10s or 12s.
func shortDuration(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%ds", d/time.Minute, d%time.Minute/time.Second)
	default:
		return fmt.Sprintf("%ds", d/time.Second)
	}
}
