package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
)

func newStatusCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show this peer, the federation's members and every organisation",
		Long: `Show this peer and its organisation, the Raft leader and this peer's view of
the log, the federation's members, and every organisation's quota, power
limit, power in use (PI), DP, task counts and energy; the federation's job
policy and retention rule (when a finished task leaves the replicated state,
see peer retention).

--json prints {"self","org","leader","raft":{…},"peers":[{"id","org","voter",
"leader","addrs"}],"job_policy":{…},"retention":{"after_ms","keep","votes"},
"orgs":[{"name","quota_gflops","power_quota_w","limit_w","pi_w","dp","queued",
"running","done","failed","energy_j",…}],"build":{"version","commit",
"go_version",…}} (build: the running peer's, see peer version).`,
		Example: `  peer status --data /var/lib/coopgrid
  peer status --data /var/lib/coopgrid --json | jq '.orgs[] | {name, pi_w, limit_w}'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return c.fail("status", err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), st)
			}
			return printStatus(cmd.OutOrStdout(), st)
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}

func printStatus(w io.Writer, st api.Status) error {
	leader := "none (no quorum?)"
	switch {
	case st.Leader != "" && st.Leader == st.Self:
		leader = st.Leader + " (this peer)"
	case st.Leader != "":
		leader = st.Leader
		for _, p := range st.Peers {
			if p.ID == st.Leader && p.Org != "" {
				leader += " (" + p.Org + ")"
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "peer\t%s (%s)\n", st.Self, orDash(st.Org))
	fmt.Fprintf(tw, "leader\t%s\n", leader)
	fmt.Fprintf(tw, "raft\t%s, applied index %d, state hash %s\n", orDash(st.Raft.State), st.Raft.AppliedIndex, short(st.Raft.StateHash))
	if st.Build != nil {
		fmt.Fprintf(tw, "version\t%s\n", versionLine(*st.Build))
	}
	if st.Raft.CommandVersion > 0 {
		fmt.Fprintf(tw, "commands\tup to version %d\n", st.Raft.CommandVersion)
	}
	if st.Raft.Halted != "" {
		fmt.Fprintf(tw, "HALTED\t%s\n", st.Raft.Halted)
	}
	if jp := st.JobPolicy; jp != nil {
		pending := ""
		if len(jp.Votes) > 0 {
			pending = fmt.Sprintf(", %d votes pending (peer job-policy)", len(jp.Votes))
		}
		fmt.Fprintf(tw, "job policy\t%s%s\n", jp.Policy, pending)
	}
	if rv := st.Retention; rv != nil {
		pending := ""
		if len(rv.Votes) > 0 {
			pending = fmt.Sprintf(", %d votes pending (peer retention)", len(rv.Votes))
		}
		fmt.Fprintf(tw, "retention\t%s%s\n", ruleString(rv.AfterMs, rv.Keep), pending)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nmembers (%d):\n", len(st.Peers))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tORG\tVOTER\tLEADER\tADDRS")
	for _, p := range st.Peers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ID, orDash(p.Org), yesNo(p.Voter), yesNo(p.Leader), orDash(strings.Join(p.Addrs, " ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\norganisations (%d):\n", len(st.Orgs))
	return printOrgs(w, st.Orgs)
}

// short abbreviates a hash for a table.
func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return orDash(h)
}

func printOrgs(w io.Writer, os []api.OrgView) error {
	if len(os) == 0 {
		fmt.Fprintln(w, "no organisations")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ORG\tMACHINES\tQUOTA GFLOPS\tPOWER QUOTA W\tLIMIT W\tPI W\tDP\tQUEUED\tRUNNING\tDONE\tFAILED\tCANCELLED\tENERGY J\tOWNER J")
	for _, o := range os {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", o.Name, o.Machines,
			num(o.QuotaGFLOPS), num(o.PowerQuotaW), num(o.LimitW), num(o.PIW), dpStr(o.DP),
			o.Queued, o.Running, o.Done, o.Failed, o.Cancelled, num(o.EnergyJ), num(o.OwnerEnergyJ))
	}
	return tw.Flush()
}

func newOrgsCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "orgs",
		Short: "List the organisations with their quotas, limits, power in use, DP, tasks and energy",
		Long: `List the organisations in registration order: machines, quota (GFLOPS of
their machines that are up), power quota, power limit, power in use by
their tasks (PI), DP, task counts, and energy as user (their tasks,
wherever they ran) and as owner (anything run on their machines).`,
		Example: `  peer orgs --data /var/lib/coopgrid`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			os, err := c.Orgs(cmd.Context())
			if err != nil {
				return c.fail("orgs", err)
			}
			if os == nil {
				os = []api.OrgView{}
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), os)
			}
			return printOrgs(cmd.OutOrStdout(), os)
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}

func newMachinesCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "machines",
		Short: "List the federation's machines, their state and the task each holds",
		Long: `List the federation's machines: speed, busy and idle power, state (with
"(drained)", "(opportunistic)" or "(reclaimed)"), the task each holds and its
last heartbeat. Once the federation tracks machine stability, three columns
follow: MTBF (time available divided by interruptions), FAILURES (losses, and
"+Nr" for its owner's reclaims) and AVAILABLE (share of time available), the
same on every peer (docs/OPERATIONS.md, "Opportunistic machines and machine
stability").`,
		Example: `  peer machines --data /var/lib/coopgrid`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			ms, err := c.Machines(cmd.Context())
			if err != nil {
				return c.fail("machines", err)
			}
			if ms == nil {
				ms = []api.MachineView{}
			}
			w := cmd.OutOrStdout()
			if f.json {
				return printJSON(w, ms)
			}
			if len(ms) == 0 {
				fmt.Fprintln(w, "no machines")
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			// The stability columns once the federation tracks it.
			stable := slices.ContainsFunc(ms, func(m api.MachineView) bool { return m.Stability != nil })
			head := "MACHINE\tORG\tGFLOPS\tBUSY W\tIDLE W\tSTATE\tTASK\tLAST HEARTBEAT"
			if stable {
				head += "\tMTBF\tFAILURES\tAVAILABLE"
			}
			fmt.Fprintln(tw, head)
			unprotected := false
			for _, m := range ms {
				idle := "-"
				if m.IdleW > 0 {
					idle = num(m.IdleW)
				}
				id := m.ID
				if m.Unprotected {
					id += " " + unprotectedMark
					unprotected = true
				}
				state := m.State
				if m.Drained {
					state += " (drained)"
				}
				switch {
				case m.Reclaimed:
					state += " (reclaimed)"
				case m.Opportunistic:
					state += " (opportunistic)"
				}
				row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", id, m.Org, machineSpeed(m), num(m.BusyW), idle, state, orDash(m.Task), when(m.LastHeartbeatMs))
				if stable {
					row += "\t" + stabilityCells(m)
				}
				fmt.Fprintln(tw, row)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if unprotected {
				fmt.Fprintln(w, unprotectedNote)
			}
			return nil
		},
	}
	addClientFlags(cmd, &f, true)
	cmd.AddCommand(newDrainCmd(true), newDrainCmd(false), newReclaimCmd(true), newReclaimCmd(false))
	return cmd
}

func newLedgerCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Show the energy ledger: every organisation's energy as user and as owner",
		Long: `Show the replicated energy ledger at this peer's applied index: for each
organisation the energy its tasks used wherever they ran (user), and the
energy used on its machines by its own tasks and by other organisations'
tasks (owner), in joules, with its power limit and power in use. The state
hash is equal on every peer at the same index.`,
		Example: `  peer ledger --data /var/lib/coopgrid --json`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			l, err := c.Ledger(cmd.Context())
			if err != nil {
				return c.fail("ledger", err)
			}
			w := cmd.OutOrStdout()
			if f.json {
				if l.Orgs == nil {
					l.Orgs = []api.LedgerAccount{}
				}
				return printJSON(w, l)
			}
			fmt.Fprintf(w, "applied index %d, state hash %s\n\n", l.AppliedIndex, orDash(l.StateHash))
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ORG\tUSER J\tOWNER SELF J\tOWNER OTHERS J\tLIMIT W\tPI W")
			for _, a := range l.Orgs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.Org, num(a.UserJ), num(a.OwnerSelfJ), num(a.OwnerOthersJ), num(a.LimitW), num(a.PIW))
			}
			return tw.Flush()
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}

// parseLimit reads "80%", "1500W", "1500 w" or "1500" (watts).
func parseLimit(s string) (api.LimitRequest, error) {
	t := strings.TrimSpace(s)
	var req api.LimitRequest
	n, pct := strings.CutSuffix(t, "%")
	if !pct {
		n = strings.TrimSuffix(strings.TrimSuffix(t, "W"), "w")
	}
	n = strings.TrimSpace(n)
	v, err := strconv.ParseFloat(n, 64)
	// Hexadecimal floats and digit separators parse but are surely typos.
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || strings.ContainsAny(n, "xXpP_") {
		return req, usageErr("limit %q: want a percentage of the power quota (80%%) or watts (1500W or 1500)", s)
	}
	if pct {
		req.Percent = &v
	} else {
		req.Watts = &v
	}
	if err := api.ValidateLimit(req); err != nil {
		return req, usageErr("limit %q: %s", s, strings.TrimPrefix(err.Error(), api.CodeBadRequest+": "))
	}
	return req, nil
}

func newLimitCmd() *cobra.Command {
	limit := &cobra.Command{
		Use:   "limit",
		Short: "Change this organisation's power limit",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("limit: missing subcommand: peer limit set 80%%|WATTS")
		},
	}
	limit.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	var f clientFlags
	set := &cobra.Command{
		Use:   "set 80%|WATTS",
		Short: "Set this organisation's power limit, as a percentage of its power quota or in watts",
		Long: `Set the power limit of this peer's organisation: the most busy power the
machines running its tasks may draw together (Lim_i). A percentage is of the
organisation's power quota (the busy power of its machines that are up);
it may exceed 100%, since its tasks may run on other organisations'
machines. A limit below the power its running tasks draw now is refused:
lower it once they finish.`,
		Example: `  peer limit set --data /var/lib/coopgrid 80%
  peer limit set --data /var/lib/coopgrid 1500W`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := parseLimit(args[0])
			if err != nil {
				return err
			}
			c, err := f.connect()
			if err != nil {
				return err
			}
			o, err := c.SetLimit(cmd.Context(), req)
			if err != nil {
				return c.fail("limit set "+args[0], err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), o)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: power limit %s W (in use %s W, power quota %s W)\n", o.Name, num(o.LimitW), num(o.PIW), num(o.PowerQuotaW))
			return nil
		},
	}
	addClientFlags(set, &f, true)
	limit.AddCommand(set)
	return limit
}

func newLeaveCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Remove this peer from the federation gracefully",
		Long: `Ask the running peer to leave the federation gracefully. The federation's
ledger keeps the organisation's history.`,
		Example: `  peer leave --data /var/lib/coopgrid`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.connect()
			if err != nil {
				return err
			}
			if err := c.Leave(cmd.Context()); err != nil {
				return c.fail("leave", err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), map[string]bool{"left": true})
			}
			fmt.Fprintln(cmd.OutOrStdout(), "left the federation")
			return nil
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}

// unprotectedMark follows a machine whose owner lets tasks run with its
// peer's own user and privileges (unsafe_run_as_peer_user), explained by
// unprotectedNote under the table: a task placed there can read that
// peer's keys and token and write its data directory.
const (
	unprotectedMark = "(UNPROTECTED!)"
	unprotectedNote = "UNPROTECTED!: its owner set unsafe_run_as_peer_user: tasks run with that peer's own user and privileges (no dedicated user, no sandbox) and can read its keys and write its data directory"
)

// machineSpeed is the declared GFLOPS, followed by the speed the ledger
// corrected it to from observed runs, and "(slow!)" when those runs show
// less than half the declared speed (docs/SECURITY.md, "Executors").
func machineSpeed(m api.MachineView) string {
	s := num(m.GFLOPS)
	if m.EffectiveGFLOPS > 0 {
		s += " → " + num(m.EffectiveGFLOPS)
	}
	if m.SpeedMismatch {
		s += " (slow!)"
	}
	return s
}
