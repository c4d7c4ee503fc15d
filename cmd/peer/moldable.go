package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/coopgrid/coopgrid/api"
)

// alternativeLines are a moldable task's alternatives, one line each: its
// request, the start and end the choosing peer predicted, and which one
// SA_s chose.
func alternativeLines(m *api.MoldableView, line func(k, v string)) {
	if m == nil {
		return
	}
	for i, a := range m.Alternatives {
		v := fmt.Sprintf("%d × %d cpus for %s: ", a.Nodes, max(a.CPUs, 1), time.Duration(a.WallLimitMs)*time.Millisecond)
		if a.PredictedEndMs == 0 {
			v += "predicted never to start"
		} else {
			v += "predicted " + when(a.PredictedStartMs) + " to " + when(a.PredictedEndMs)
		}
		if i == m.Chosen {
			v += " (chosen by SA_s)"
		}
		line(fmt.Sprintf("alternative %d", i), v)
	}
}

// applyChoices sets each chosen task's nodes in ts (a batch) to its
// chosen alternative's, so that its lines name its parts.
func applyChoices(ts []api.SubmitTask, choices []api.MoldableChoice) {
	for _, c := range choices {
		if c.Task >= 0 && c.Task < len(ts) && c.Chosen >= 0 && c.Chosen < len(c.Alternatives) {
			ts[c.Task].Nodes = c.Alternatives[c.Chosen].Nodes
		}
	}
}

func hasAlternatives(ts []api.SubmitTask) bool {
	for _, t := range ts {
		if len(t.Alternatives) > 0 {
			return true
		}
	}
	return false
}

// printChoices prints SA_s's choices of a submission, task by task.
func printChoices(w io.Writer, out submitOutput) error {
	for _, c := range out.Moldable {
		name := fmt.Sprintf("tasks[%d]", c.Task)
		fmt.Fprintf(w, "%s: SA_s chose alternative %d\n", name, c.Chosen)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		alternativeLines(&c.MoldableView, func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) })
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
