package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/jobfile"
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

The task IDs are printed in the file's order.`,
		Example: `  peer submit --data /var/lib/coopgrid examples/jobs/sweep.yaml
  peer submit --data /var/lib/coopgrid --json job.yaml | jq -r '.task_ids[]'`,
		Args: cobra.ExactArgs(1),
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
				resp, err := c.Submit(cmd.Context(), req)
				if err != nil {
					return c.fail("submit "+args[0], err)
				}
				out.TaskIDs = resp.TaskIDs
				for i := range out.Tasks {
					out.Tasks[i].ID = resp.TaskIDs[i]
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
			fmt.Fprintf(w, "submitted job %s: %d tasks\n", out.Job, len(out.Tasks))
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME")
			for _, t := range out.Tasks {
				fmt.Fprintf(tw, "%s\t%s\n", t.ID, t.Name)
			}
			return tw.Flush()
		},
	}
	addClientFlags(cmd, &f, true)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check the job file and print what would be submitted, without contacting the peer")
	return cmd
}
