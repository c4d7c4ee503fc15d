package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
)

func newTasksCmd() *cobra.Command {
	var f clientFlags
	var q api.TaskQuery
	var states []string
	var watch bool
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List the federation's tasks",
		Long: `List tasks in submit order, optionally only one organisation's or only some
states (queued, assigned, running, done, failed, cancelled).

--job NAME lists only the tasks submitted in the job NAME.

--limit N pages: the list stops after N tasks and its last line names the
--after cursor of the next page (the last task's "seq").

Finished tasks the federation's retention rule took out of the state are
in ` + "`peer history`" + `.

--json prints a list of {"id","org","name","state","machine","attempts",
"exit_code","reason","size_gflop","submitted_ms","ended_ms","seq"} and, when
set, "pending", "pending_detail", "job", "machine_failures", "failures",
"avoid".

--watch lists the tasks, then prints every change of state as the peer
applies it (GET /v1/events): event ID, task, organisation, old → new state,
machine, reason; with --org only that organisation's tasks. It reconnects
by itself after the last event seen, and lists again if it fell too far
behind. With --json it prints the events only, one JSON object per line.`,
		Example: `  peer tasks --data /var/lib/coopgrid
  peer tasks --data /var/lib/coopgrid --org alpha --state queued,running --json
  peer tasks --data /var/lib/coopgrid --watch --org alpha`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range states {
				for _, st := range strings.Split(s, ",") {
					if st = strings.TrimSpace(st); st != "" {
						q.States = append(q.States, st)
					}
				}
			}
			if err := api.ValidateTaskQuery(q); err != nil {
				return usageErr("%s", strings.TrimPrefix(err.Error(), api.CodeBadRequest+": "))
			}
			c, err := f.connect()
			if err != nil {
				return err
			}
			if watch {
				return watchTasks(cmd.Context(), c, cmd.OutOrStdout(), q, f.json)
			}
			ts, err := c.Tasks(cmd.Context(), q)
			if err != nil {
				return c.fail("tasks", err)
			}
			if ts == nil {
				ts = []api.TaskView{}
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), ts)
			}
			if err := printTasks(cmd.OutOrStdout(), ts); err != nil {
				return err
			}
			if q.Limit > 0 && len(ts) == q.Limit {
				fmt.Fprintf(cmd.OutOrStdout(), "more: --after %d\n", ts[len(ts)-1].Seq)
			}
			return nil
		},
	}
	addClientFlags(cmd, &f, true)
	fl := cmd.Flags()
	fl.StringVar(&q.Org, "org", "", "only this organisation's tasks")
	fl.StringVar(&q.Job, "job", "", "only the tasks submitted in the job of this name")
	fl.StringSliceVar(&states, "state", nil, "only tasks in these states (repeat or separate with commas)")
	fl.IntVar(&q.Limit, "limit", 0, "at most this many tasks (0: all)")
	fl.Uint64Var(&q.After, "after", 0, "only tasks submitted after the one of this seq (the cursor `--limit` prints)")
	fl.BoolVar(&watch, "watch", false, "after the list, print every change of state as it happens, until interrupted")
	return cmd
}

// exitStr shows a task's exit code once it has one.
func exitStr(t api.TaskView) string {
	if t.State != "done" && t.State != "failed" {
		return "-"
	}
	return strconv.Itoa(t.ExitCode)
}

func printTasks(w io.Writer, ts []api.TaskView) error {
	if len(ts) == 0 {
		fmt.Fprintln(w, "no tasks")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	classes, now := hasClasses(ts), time.Now()
	head := "ID\tNAME\tJOB\tORG\tSTATE\tMACHINE\tATTEMPTS\tEXIT\tGFLOP\tSUBMITTED\tWAITING"
	if classes {
		head += "\tCLASS\tDEADLINE\tPREDICTED FINISH"
	}
	fmt.Fprintln(tw, head)
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", t.ID, orDash(t.Name), orDash(t.Job), t.Org, t.State,
			orDash(t.Machine), t.Attempts, exitStr(t), num(t.SizeGFlop), when(t.SubmittedMs), orDash(t.Pending))
		if classes {
			fmt.Fprintf(tw, "\t%s\t%s\t%s", orDash(t.Class), timeLeft(t, now), when(t.PredictedFinishMs))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// taskArg checks a task ID argument before anything is sent.
func taskArg(id string) error {
	if !api.ValidTaskID(id) {
		return usageErr("task ID %q: want <org>-<n>, as `peer tasks` prints", id)
	}
	return nil
}

func newTaskCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:     "task ID",
		Short:   "Show one task in detail: command, state, runs, energy, outputs",
		Example: `  peer task --data /var/lib/coopgrid alpha-12`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := taskArg(args[0]); err != nil {
				return err
			}
			c, err := f.connect()
			if err != nil {
				return err
			}
			t, err := c.Task(cmd.Context(), args[0])
			if err != nil {
				return c.fail("task "+args[0], err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), t)
			}
			return printTask(cmd.OutOrStdout(), t)
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}

func printTask(w io.Writer, t api.TaskDetail) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	line("id", t.ID)
	line("name", orDash(t.Name))
	line("org", t.Org)
	line("state", t.State)
	if t.Machine != "" {
		line("machine", t.Machine)
	}
	if t.State == "done" || t.State == "failed" {
		line("exit code", strconv.Itoa(t.ExitCode))
	}
	if t.Reason != "" {
		line("reason", t.Reason)
	}
	if t.Pending != "" {
		line("waiting", t.Pending+": "+t.PendingDetail)
	}
	if t.Job != "" {
		line("job", t.Job)
	}
	if g := t.Gang; g != nil {
		line("gang", fmt.Sprintf("%s, rank %d of %d", g.ID, g.Rank, g.Size))
	}
	alternativeLines(t.Moldable, line) // moldable.go
	classLines(t.TaskView, time.Now(), line)
	line("attempts", strconv.Itoa(t.Attempts))
	if t.MaxAttempts > 0 {
		line("machine failures", fmt.Sprintf("%d (fails at %d)", t.MachineFailures, t.MaxAttempts))
	}
	line("retries", fmt.Sprintf("%d of %d used", t.Failures, t.Retries))
	if len(t.Avoid) > 0 {
		line("avoids", strings.Join(t.Avoid, " "))
	}
	line("size", num(t.SizeGFlop)+" GFlop ("+num(t.RemainingGFlop)+" remaining)")
	line("submitted", when(t.SubmittedMs))
	if t.EndedMs != 0 {
		line("ended", when(t.EndedMs))
	}
	line("argv", shellWords(t.Argv))
	if len(t.Env) > 0 {
		keys := make([]string, 0, len(t.Env))
		for k := range t.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			keys[i] = k + "=" + strconv.Quote(t.Env[k])
		}
		line("env", strings.Join(keys, " "))
	}
	if t.WallLimitMs > 0 {
		line("wall-clock limit", fmt.Sprintf("%gs", float64(t.WallLimitMs)/1000))
	}
	if len(t.Inputs) > 0 {
		line("inputs", strings.Join(t.Inputs, " "))
	}
	if len(t.Outputs) > 0 {
		line("outputs", strings.Join(t.Outputs, " "))
	}
	line("checkpointable", yesNo(t.Checkpointable))
	if ck := t.Checkpoint; ck != nil {
		line("checkpoint", fmt.Sprintf("%s, %d bytes, %s GFlop done, at %s, held by %s", ck.Hash, ck.SizeBytes, num(ck.ProgressGFlop), when(ck.AtMs), strings.Join(ck.Holders, " ")))
	}
	for _, f := range t.OutputFiles {
		line("output file", f)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(t.Segments) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nruns:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tOWNER\tSTART\tEND\tOUTCOME\tENERGY J\tSOURCE")
	for _, s := range t.Segments {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Machine, s.MachineOrg, when(s.StartMs), when(s.EndMs), s.Outcome, num(s.EnergyJ), orDash(s.Source))
	}
	return tw.Flush()
}

func newLogsCmd() *cobra.Command {
	var f clientFlags
	var stderr bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a task's captured standard output (or --stderr) of its latest run",
		Long: `Print what the task wrote to its standard output (or, with --stderr, its
standard error) in its latest run, fetched from whichever peer ran it. The
bytes are printed as they are.`,
		Example: `  peer logs --data /var/lib/coopgrid alpha-12
  peer logs --data /var/lib/coopgrid --stderr alpha-12`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := taskArg(args[0]); err != nil {
				return err
			}
			c, err := f.connect()
			if err != nil {
				return err
			}
			stream := api.StreamStdout
			if stderr {
				stream = api.StreamStderr
			}
			data, err := c.Logs(cmd.Context(), args[0], stream)
			if err != nil {
				return c.fail("logs of "+args[0], err)
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
	addClientFlags(cmd, &f, false)
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print the standard error instead")
	return cmd
}

func newCancelCmd() *cobra.Command {
	return newTaskOpCmd(taskOp{
		verb: "cancel", past: "cancelled",
		short: "Cancel tasks of this peer's organisation (by ID, or a whole job with --job)",
		long: `Cancel tasks of this peer's organisation. A queued task is cancelled at once;
a running one is stopped by the peer that runs it (SIGTERM, then SIGKILL
after the grace period). Cancelling another organisation's task is refused.

--job NAME cancels every queued, assigned or running task of this
organisation submitted in the job NAME (the name ` + "`peer submit`" + ` printed).

Each ID is checked before any is sent; the command stops at the first
failure.`,
		example: `  peer cancel --data /var/lib/coopgrid alpha-12 alpha-13
  peer cancel --data /var/lib/coopgrid --job sweep`,
		states: []string{"queued", "assigned", "running"},
		do:     func(c *conn, cmd *cobra.Command, id string) error { return c.Cancel(cmd.Context(), id) },
	})
}

func newRetryCmd() *cobra.Command {
	return newTaskOpCmd(taskOp{
		verb: "retry", past: "queued again",
		short: "Queue failed or cancelled tasks of this peer's organisation again (by ID, or a whole job with --job)",
		long: `Queue failed or cancelled tasks of this peer's organisation again, each as a
new attempt: its failure counts and the machines it avoided are cleared,
its checkpoint (if any) is kept. Retrying another organisation's task, or
one that is not failed or cancelled, is refused.

--job NAME retries every failed or cancelled task of this organisation
submitted in the job NAME.

Each ID is checked before any is sent; the command stops at the first
failure.`,
		example: `  peer retry --data /var/lib/coopgrid alpha-12
  peer retry --data /var/lib/coopgrid --job sweep`,
		states: []string{"failed", "cancelled"},
		do:     func(c *conn, cmd *cobra.Command, id string) error { return c.Retry(cmd.Context(), id) },
	})
}

// taskOp is an operation on tasks given by ID or by job (cancel, retry).
type taskOp struct {
	verb, past, short, long, example string
	// states are the states --job selects.
	states []string
	do     func(c *conn, cmd *cobra.Command, id string) error
}

func newTaskOpCmd(op taskOp) *cobra.Command {
	var f clientFlags
	var job string
	cmd := &cobra.Command{
		Use:     op.verb + " ID...|--job NAME",
		Short:   op.short,
		Long:    op.long,
		Example: op.example,
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			if (job == "") == (len(args) == 0) {
				return fmt.Errorf("give task IDs or --job NAME, not both")
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, id := range args {
				if err := taskArg(id); err != nil {
					return err
				}
			}
			if i := firstDuplicate(args); i >= 0 {
				return usageErr("task %s given twice", args[i])
			}
			if job != "" {
				if err := api.ValidateTaskQuery(api.TaskQuery{Job: job}); err != nil {
					return usageErr("%s", strings.TrimPrefix(err.Error(), api.CodeBadRequest+": "))
				}
			}
			c, err := f.connect()
			if err != nil {
				return err
			}
			ids := args
			if job != "" {
				if ids, err = jobTasks(cmd, c, job, op.states); err != nil {
					return err
				}
			}
			done := []string{}
			for _, id := range ids {
				if err := op.do(c, cmd, id); err != nil {
					if len(done) > 0 && !f.json {
						fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", op.past, strings.Join(done, " "))
					}
					return c.fail(op.verb+" "+id, err)
				}
				done = append(done, id)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), map[string][]string{strings.ReplaceAll(op.past, " ", "_"): done})
			}
			if len(done) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "job %s: no task of this organisation to %s\n", job, op.verb)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", op.past, strings.Join(done, " "))
			return nil
		},
	}
	addClientFlags(cmd, &f, true)
	cmd.Flags().StringVar(&job, "job", "", "every task of this organisation's job NAME (in the states this command applies to)")
	return cmd
}

// jobTasks lists the IDs of this peer's organisation's tasks of job in
// the given states.
func jobTasks(cmd *cobra.Command, c *conn, job string, states []string) ([]string, error) {
	st, err := c.Status(cmd.Context())
	if err != nil {
		return nil, c.fail("status", err)
	}
	ts, err := c.Tasks(cmd.Context(), api.TaskQuery{Org: st.Org, Job: job, States: states})
	if err != nil {
		return nil, c.fail("tasks of job "+job, err)
	}
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids, nil
}

func firstDuplicate(s []string) int {
	for i := range s {
		if slices.Contains(s[:i], s[i]) {
			return i
		}
	}
	return -1
}

// shellWords prints argv as a shell would need it typed: plain words as
// they are, anything else quoted, so that argument boundaries show.
func shellWords(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = a
		if a == "" || strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./=:,+@%-", r))
		}) >= 0 {
			out[i] = strconv.Quote(a)
		}
	}
	return strings.Join(out, " ")
}
