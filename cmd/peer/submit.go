package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/jobfile"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// submitOutput is `peer submit --json`: the job and its task IDs in the
// file's order.
type submitOutput struct {
	Job string `json:"job"`
	// RequestID is the submission's idempotency key (--request-id, or one
	// made up): resending the job with it never queues its tasks twice.
	RequestID string `json:"request_id,omitempty"`
	// Replayed: every batch had already been queued by an earlier submit
	// with this request ID; the IDs are those tasks'.
	Replayed bool         `json:"replayed,omitempty"`
	TaskIDs  []string     `json:"task_ids"`
	Tasks    []submitLine `json:"tasks"`
	DryRun   bool         `json:"dry_run,omitempty"`
	// States are the tasks' end states, with --wait.
	States map[string]string `json:"states,omitempty"`
	// AcceptedAsNice are the soft-deadline tasks (on_miss: nice) that no
	// machine could finish in time, queued as nice; Note says why.
	AcceptedAsNice []string `json:"accepted_as_nice,omitempty"`
	Note           string   `json:"note,omitempty"`
	// Moldable: SA_s's choice for each task with alternatives (Task
	// indexes the job's tasks).
	Moldable []api.MoldableChoice `json:"moldable,omitempty"`
}

type submitLine struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
}

func newSubmitCmd() *cobra.Command {
	var f clientFlags
	var dryRun bool
	var requestID string
	var wait bool
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
before the error.

Every submission carries a request ID (--request-id, or a random one,
printed): the client resends a submission that got no answer, and the
ledger never queues the same request twice. If the command still fails
without knowing whether the tasks were queued, run it again with the
printed --request-id: tasks already queued are not queued again and their
IDs are printed ("already submitted"). Batch i ≥ 1 of a large job uses
"<request-id>.<i>".

--wait then waits until every task ended, following the peer's events
(GET /v1/events), and prints how they ended; the exit code is 0 when all
ended done, 3 when some failed or were cancelled (1 when the peer could not
tell, 2 for a usage error).`,
		Example: `  peer submit --data /var/lib/coopgrid examples/jobs/sweep.yaml
  peer submit --data /var/lib/coopgrid --json job.yaml | jq -r '.task_ids[]'
  peer submit --data /var/lib/coopgrid --request-id sweep-2026-11-22 examples/jobs/sweep.yaml
  peer submit --data /var/lib/coopgrid --wait examples/jobs/sweep.yaml && echo all done`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The one check on this side: jobfile holds the job to the
			// API's and the ledger's limits (the peer checks again as it
			// encodes the ledger command).
			job, err := jobfile.Load(args[0], jobfile.Options{})
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			req := apiconv.SubmitRequestFromJob(job)
			if requestID != "" {
				// The longest key of the job (its last batch's) must be valid.
				if last := batchRequestID(requestID, (len(req.Tasks)-1)/submitBatch); !api.ValidRequestID(last) {
					return usageErr("--request-id %q: want 1-%d characters of [A-Za-z0-9._:-] (including the suffix %q of the job's last batch)",
						requestID, api.MaxRequestIDLen, strings.TrimPrefix(last, requestID))
				}
			}
			out := submitOutput{Job: req.Job, TaskIDs: []string{}, DryRun: dryRun}
			for _, t := range req.Tasks {
				out.Tasks = append(out.Tasks, submitLines(t)...)
			}
			if dryRun && wait {
				return usageErr("--wait and --dry-run: a dry run submits nothing to wait for")
			}
			var waiter *waitTasks
			var org string
			if !dryRun {
				c, err := f.connect()
				if err != nil {
					return err
				}
				if wait {
					// The stream opens before the submission: no end
					// can come before it.
					st, err := c.Status(cmd.Context())
					if err != nil {
						return c.fail("submit --wait: status", err)
					}
					org = st.Org
					if waiter, err = startWaiting(cmd.Context(), c, org); err != nil {
						return c.fail("submit --wait: watch the tasks", err)
					}
				}
				if requestID == "" {
					requestID = api.NewRequestID()
				}
				out.RequestID = requestID
				ids, replayed, err := submitBatches(cmd, c, req, requestID, &out)
				out.TaskIDs = ids
				out.Replayed = replayed
				// A moldable task's parts are its chosen alternative's.
				out.Tasks = out.Tasks[:0]
				for _, t := range req.Tasks {
					out.Tasks = append(out.Tasks, submitLines(t)...)
				}
				for i, id := range ids[:min(len(ids), len(out.Tasks))] {
					out.Tasks[i].ID = id
				}
				if err != nil {
					if len(ids) == 0 {
						return c.fail(fmt.Sprintf("submit %s (request ID %s)", args[0], requestID), err)
					}
					// Some batches are in: say exactly which, on stdout
					// as usual, before the error.
					out.Tasks = out.Tasks[:min(len(ids), len(out.Tasks))]
					if f.json {
						_ = printJSON(cmd.OutOrStdout(), out)
					} else {
						_ = printSubmitted(cmd.OutOrStdout(), out)
					}
					return c.fail(fmt.Sprintf("submit %s: only the first %d of %d tasks were submitted; resend with --request-id %s to submit the rest without queuing these again", args[0], len(ids), len(req.Tasks), requestID), err)
				}
				if waiter != nil {
					if !f.json {
						_ = printSubmitted(cmd.OutOrStdout(), out)
						fmt.Fprintf(cmd.OutOrStdout(), "waiting for %d tasks to end\n", len(ids))
					}
					states, err := waiter.wait(cmd.Context(), org, ids)
					if err != nil {
						return c.fail("submit --wait", err)
					}
					out.States = states
					if f.json {
						_ = printJSON(cmd.OutOrStdout(), out)
					}
					return waitVerdict(cmd.OutOrStdout(), states, f.json)
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
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every task ended; exit 0 only if all ended done (3 otherwise)")
	cmd.Flags().StringVar(&requestID, "request-id", "", "idempotency key of this submission (1-128 of [A-Za-z0-9._:-]; default: random): resending the job with the same one never queues its tasks twice")
	return cmd
}

func printSubmitted(w io.Writer, out submitOutput) error {
	if out.Replayed {
		fmt.Fprintf(w, "already submitted (request ID %s): job %s: %d tasks, nothing queued again\n", out.RequestID, out.Job, len(out.Tasks))
	} else {
		fmt.Fprintf(w, "submitted job %s: %d tasks\n", out.Job, len(out.Tasks))
	}
	if len(out.AcceptedAsNice) > 0 {
		fmt.Fprintf(w, "%d soft-deadline tasks queued as nice (on_miss: nice): %s\n%s\n", len(out.AcceptedAsNice), strings.Join(out.AcceptedAsNice, " "), out.Note)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME")
	for _, t := range out.Tasks {
		fmt.Fprintf(tw, "%s\t%s\n", t.ID, t.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printChoices(w, out)
}

// submitBatch is the most tasks sent in one request: a peer queues at most
// that many at once (one ledger command) and may refuse more.
const submitBatch = api.MaxTasksPerSubmit

// submitBatches submits req in batches of submitBatch tasks, in order,
// batch i with request ID batchRequestID(requestID, i), and returns the IDs
// given so far and whether every batch was a replay; it stops at the first
// failure. A job file holds at most 100,000 tasks, so a large job is not
// atomic: the caller reports what went in, and a resend with the same
// request ID completes it without queuing the batches already in.
//
// The soft-deadline tasks the peer queued as nice are added to out.
func submitBatches(cmd *cobra.Command, c *conn, req api.SubmitRequest, requestID string, out *submitOutput) ([]string, bool, error) {
	ids := make([]string, 0, len(req.Tasks))
	replayed := true
	for batch, start := 0, 0; start < len(req.Tasks); batch, start = batch+1, start+submitBatch {
		end := min(start+submitBatch, len(req.Tasks))
		resp, err := c.Submit(cmd.Context(), api.SubmitRequest{Job: req.Job, RequestID: batchRequestID(requestID, batch), Tasks: req.Tasks[start:end]})
		if err != nil {
			return ids, false, err
		}
		applyChoices(req.Tasks[start:end], resp.Moldable)
		for _, m := range resp.Moldable {
			m.Task += start
			out.Moldable = append(out.Moldable, m)
		}
		// A replay does not say which alternatives the tasks run.
		if want := taskCount(req.Tasks[start:end]); len(resp.TaskIDs) != want && (len(resp.Moldable) > 0 || !hasAlternatives(req.Tasks[start:end])) {
			return ids, false, fmt.Errorf("the peer returned %d task IDs for %d tasks", len(resp.TaskIDs), want)
		}
		ids = append(ids, resp.TaskIDs...)
		replayed = replayed && resp.Replayed
		out.AcceptedAsNice = append(out.AcceptedAsNice, resp.AcceptedAsNice...)
		if resp.Note != "" && out.Note == "" {
			out.Note = resp.Note
		}
	}
	return ids, replayed, nil
}

// batchRequestID is the request ID of a job's batch i: the job's own for
// the first, "<id>.<i>" for the others.
func batchRequestID(id string, i int) string {
	if i == 0 {
		return id
	}
	return fmt.Sprintf("%s.%d", id, i)
}

// submitLines are the lines of one submitted task: one, or one per part
// of a parallel job (nodes ≥ 2), each of which gets its own task ID.
func submitLines(t api.SubmitTask) []submitLine {
	if t.Nodes < 2 {
		return []submitLine{{Name: t.Name}}
	}
	lines := make([]submitLine, t.Nodes)
	for r := range lines {
		lines[r] = submitLine{Name: fmt.Sprintf("%s (rank %d of %d)", t.Name, r, t.Nodes)}
	}
	return lines
}

// taskCount is the number of task IDs ts get: one per part.
func taskCount(ts []api.SubmitTask) int {
	n := 0
	for _, t := range ts {
		n += max(1, t.Nodes)
	}
	return n
}
