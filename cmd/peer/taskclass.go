package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/coopgrid/coopgrid/api"
)

// Task classes and deadlines in `peer tasks` and `peer task`
// (docs/JOBS.md, "Deadlines"). The listing grows the columns only when a
// listed task has a class, so that listings without any keep their shape.

func hasClasses(ts []api.TaskView) bool {
	return slices.ContainsFunc(ts, func(t api.TaskView) bool { return t.Class != "" })
}

// timeLeft is a soft-deadline task's time to its deadline at now ("-"
// without one): "2h5m left", "late by 3m" while unfinished; once ended,
// whether it ended in time.
func timeLeft(t api.TaskView, now time.Time) string {
	if t.DeadlineMs == 0 {
		return "-"
	}
	if t.EndedMs != 0 {
		if t.EndedMs <= t.DeadlineMs {
			return "met"
		}
		return "missed by " + roundDur(t.EndedMs-t.DeadlineMs)
	}
	left := t.DeadlineMs - now.UnixMilli()
	if left < 0 {
		return "late by " + roundDur(-left)
	}
	return roundDur(left) + " left"
}

// roundDur prints ms to the second (to the minute above an hour).
func roundDur(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// classLines are `peer task`'s lines about the class and deadline.
func classLines(t api.TaskView, now time.Time, line func(k, v string)) {
	if t.Class == "" {
		return
	}
	line("class", t.Class)
	if t.DeadlineMs != 0 {
		line("deadline", fmt.Sprintf("%s (%s)", when(t.DeadlineMs), timeLeft(t, now)))
	}
	if t.PredictedFinishMs != 0 {
		s := when(t.PredictedFinishMs)
		if t.DeadlineMs != 0 && t.PredictedFinishMs > t.DeadlineMs {
			s += " (after the deadline)"
		}
		line("predicted finish", s)
	}
	if t.Migrations != 0 {
		line("migrations", fmt.Sprint(t.Migrations))
	}
	if t.DeadlineNote != "" {
		line("deadline note", t.DeadlineNote)
	}
}
