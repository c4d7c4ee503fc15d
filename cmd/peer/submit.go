package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/jobfile"
	"github.com/coopgrid/coopgrid/ledger"
)

// submitOutput is `peer submit --json`: the job and its task IDs in the
// file's order.
type submitOutput struct {
	Job     string       `json:"job"`
	TaskIDs []string     `json:"task_ids"`
	Tasks   []submitLine `json:"tasks"`
	DryRun  bool         `json:"dry_run,omitempty"`
}

type submitLine struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
}

func newSubmitCmd() *cobra.Command {
	var f clientFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "submit JOBFILE",
		Short: "Submit a job file's tasks to the federation and print their IDs",
		Long: `Read a job file (YAML, or JSON when it ends in .json; see docs/JOBS.md),
check all of it, input files included, and submit its tasks for this peer's
organisation. Nothing is sent unless the whole file is valid: a mistake is
reported with file, line, column and field, and the exit code is 2.

The task IDs are printed in the file's order. A job of more than 10,000
tasks is sent in batches of 10,000 (the most one ledger command carries);
if a later batch fails, the IDs of the tasks already submitted are printed
before the error.`,
		Example: `  peer submit --data /var/lib/coopgrid examples/jobs/sweep.yaml
  peer submit --data /var/lib/coopgrid --json job.yaml | jq -r '.task_ids[]'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			job, err := jobfile.Load(args[0], jobfile.Options{})
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			req := api.SubmitRequestFromJob(job)
			if err := api.ValidateSubmit(req, api.SubmitLimits{}); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("%s: %w", args[0], err)}
			}
			out := submitOutput{Job: req.Job, TaskIDs: []string{}, DryRun: dryRun}
			for _, t := range req.Tasks {
				out.Tasks = append(out.Tasks, submitLine{Name: t.Name})
			}
			if !dryRun {
				c, err := f.connect()
				if err != nil {
					return err
				}
				ids, err := submitBatches(cmd, c, req)
				out.TaskIDs = ids
				for i, id := range ids {
					out.Tasks[i].ID = id
				}
				if err != nil {
					if len(ids) == 0 {
						return c.fail("submit "+args[0], err)
					}
					// Some batches are in: say exactly which, on stdout
					// as usual, before the error.
					out.Tasks = out.Tasks[:len(ids)]
					if f.json {
						_ = printJSON(cmd.OutOrStdout(), out)
					} else {
						_ = printSubmitted(cmd.OutOrStdout(), out)
					}
					return c.fail(fmt.Sprintf("submit %s: only the first %d of %d tasks were submitted", args[0], len(ids), len(req.Tasks)), err)
				}
			}
			w := cmd.OutOrStdout()
			if f.json {
				return printJSON(w, out)
			}
			if dryRun {
				fmt.Fprintf(w, "%s: job %s is valid: %d tasks (nothing submitted)\n", args[0], out.Job, len(out.Tasks))
				return nil
			}
			return printSubmitted(w, out)
		},
	}
	addClientFlags(cmd, &f, true)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check the job file and print what would be submitted, without contacting the peer")
	return cmd
}

func printSubmitted(w io.Writer, out submitOutput) error {
	fmt.Fprintf(w, "submitted job %s: %d tasks\n", out.Job, len(out.Tasks))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME")
	for _, t := range out.Tasks {
		fmt.Fprintf(tw, "%s\t%s\n", t.ID, t.Name)
	}
	return tw.Flush()
}

// submitBatch is the most tasks sent in one request: one ledger command
// carries at most that many, and a daemon may refuse more at once.
const submitBatch = ledger.MaxTasksPerCommand

// submitBatches submits req in batches of submitBatch tasks, in order, and
// returns the IDs given so far; it stops at the first failure. A job file
// holds at most 100,000 tasks, so a large job is not atomic: the caller
// reports what went in.
func submitBatches(cmd *cobra.Command, c *conn, req api.SubmitRequest) ([]string, error) {
	ids := make([]string, 0, len(req.Tasks))
	for start := 0; start < len(req.Tasks); start += submitBatch {
		end := min(start+submitBatch, len(req.Tasks))
		resp, err := c.Submit(cmd.Context(), api.SubmitRequest{Job: req.Job, Tasks: req.Tasks[start:end]})
		if err != nil {
			return ids, err
		}
		if len(resp.TaskIDs) != end-start {
			return ids, fmt.Errorf("the peer returned %d task IDs for %d tasks", len(resp.TaskIDs), end-start)
		}
		ids = append(ids, resp.TaskIDs...)
	}
	return ids, nil
}
