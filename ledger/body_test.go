package ledger

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// kindTraits are the traits every kind must have. A kind added to Command
// fails TestEveryKindHasABody until it is listed here, with its traits
// decided.
var kindTraits = map[Kind]struct{ report, wakes, leaderOnly bool }{
	KindRegisterOrg:   {wakes: true},
	KindAddMachine:    {wakes: true},
	KindRemoveMachine: {wakes: true},
	KindSetLimit:      {wakes: true},
	KindSubmitTasks:   {wakes: true},
	KindCancelTask:    {wakes: true},
	KindDecisions:     {leaderOnly: true},
	KindTaskStarted:   {report: true},
	KindTaskStopped:   {report: true, wakes: true},
	KindTaskEnded:     {report: true, wakes: true},
	KindHeartbeat:     {},
	KindMachineLost:   {wakes: true},
	KindCheckpoint:    {report: true},
	// A batch wakes as its accepted items would (TestWakesScheduler); with
	// only an accepted start it does not.
	KindReports: {},
	// A zero membership body is a removal vote; an admission is
	// leader-only (TestMembershipLeaderOnly).
	KindMembership: {wakes: true},
	// Undraining offers a machine again (draining wakes a pass that
	// decides nothing: the trait sees only the Result).
	KindDrainMachine: {wakes: true},
	// A trigger is the leader's pass, computed by every peer.
	KindSchedule: {leaderOnly: true},
	// A retried task is queued again.
	KindRetryTask: {wakes: true},
	// Forgetting removes terminal tasks only: the leader's own duty.
	KindForgetTasks: {leaderOnly: true},
	// A new job policy changes how the next pass serves the queue.
	KindJobPolicy: {wakes: true},
	// A release offers a machine again.
	KindReclaimMachine: {wakes: true},
	// A new retention rule changes which tasks the leader forgets.
	KindRetentionVote: {wakes: true},
	// A migrated task is queued again, to be placed where it meets its
	// deadline.
	KindMigrateTask: {wakes: true},
	// A load changes predictions, not what may be placed.
	KindMachineLoad: {},
}

// TestEveryKindHasABody: every pointer field of Command is a body in the
// table, named in JSON as its kind, and goes through Body, Kind, the
// traits and, for a report, a Reports item and back.
func TestEveryKindHasABody(t *testing.T) {
	ct := reflect.TypeFor[Command]()
	var kinds []Kind
	for i := 0; i < ct.NumField(); i++ {
		f := ct.Field(i)
		if f.Type.Kind() != reflect.Pointer {
			continue
		}
		if !f.Type.Implements(bodyType) {
			t.Errorf("Command.%s (%s) is not a Body", f.Name, f.Type)
			continue
		}
		c := goldenEnv()
		body := reflect.New(f.Type.Elem())
		reflect.ValueOf(&c).Elem().Field(i).Set(body)
		b := c.Body()
		if b == nil || b != body.Interface().(Body) {
			t.Errorf("Command.%s: Body() is %v", f.Name, b)
			continue
		}
		k := c.Kind()
		kinds = append(kinds, k)
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); string(k) != tag {
			t.Errorf("Command.%s (json %q) has kind %q", f.Name, tag, k)
		}
		if z := commandBodies.zero(k); reflect.TypeOf(z) != f.Type {
			t.Errorf("kind %q: the table's zero body is %T", k, z)
		}
		want, ok := kindTraits[k]
		if !ok {
			t.Errorf("kind %q: no traits in kindTraits", k)
			continue
		}
		if c.LeaderOnly() != want.leaderOnly {
			t.Errorf("kind %q: LeaderOnly %v", k, c.LeaderOnly())
		}
		res := Result{Kind: k, Reports: []ReportResult{{Kind: KindTaskStarted}}}
		if got := WakesScheduler(&res); got != want.wakes {
			t.Errorf("kind %q: WakesScheduler %v", k, got)
		}
		item, isReport := ReportOf(c)
		if isReport != want.report {
			t.Errorf("kind %q: ReportOf ok %v", k, isReport)
		}
		if isReport {
			if back := item.Command(c); !reflect.DeepEqual(back, c) {
				t.Errorf("kind %q: item's command %+v, want %+v", k, back, c)
			}
			batch := goldenEnv()
			batch.Reports = &Reports{Items: []Report{item}}
			if got := batch.Reports.Items[0].Command(batch); got.Kind() != k {
				t.Errorf("kind %q: a batch item stands for kind %q", k, got.Kind())
			}
		}
	}
	if !slices.Equal(kinds, commandBodies.kinds) {
		t.Errorf("table kinds %v, Command's %v", commandBodies.kinds, kinds)
	}
	for k := range kindTraits {
		if !slices.Contains(kinds, k) {
			t.Errorf("kind %q is not carried by any Command field", k)
		}
	}
}

// TestReportFields: every field of Report is a report body of the same
// type as a Command field, and an item with none or several bodies stands
// for a command with none or several.
func TestReportFields(t *testing.T) {
	rt := reflect.TypeFor[Report]()
	if len(reportBodies.index) != rt.NumField() {
		t.Fatalf("Report has %d fields, %d of them bodies", rt.NumField(), len(reportBodies.index))
	}
	for _, i := range reportBodies.index {
		f := rt.Field(i)
		if _, ok := commandBodies.byType[f.Type]; !ok {
			t.Errorf("Report.%s (%s) is not a Command body", f.Name, f.Type)
		}
	}
	if got, want := reportBodies.kindList(), "task_started, task_stopped, task_ended, checkpoint"; got != want {
		t.Errorf("report kinds %q, want %q", got, want)
	}
	env := goldenEnv()
	if c := (Report{}).Command(env); c.Body() != nil || c.Kind() != "" {
		t.Errorf("an empty item stands for %+v", c)
	}
	two := Report{TaskStarted: &TaskStarted{}, Checkpoint: &CheckpointRecorded{}}
	c := two.Command(env)
	if c.Body() != nil || c.Kind() != "" || c.TaskStarted != two.TaskStarted || c.Checkpoint != two.Checkpoint {
		t.Errorf("a two-body item stands for %+v", c)
	}
	if _, ok := ReportOf(c); ok {
		t.Error("ReportOf accepts a command with two bodies")
	}
	if _, ok := ReportOf(env); ok {
		t.Error("ReportOf accepts a command with no body")
	}
}

// TestCommandBody: Body, Kind and LeaderOnly of commands with none, one
// and several bodies.
func TestCommandBody(t *testing.T) {
	c := goldenEnv()
	if c.Body() != nil || c.Kind() != "" || c.LeaderOnly() {
		t.Fatalf("no body: %v %q %v", c.Body(), c.Kind(), c.LeaderOnly())
	}
	d := &Decisions{}
	c.Decisions = d
	if c.Body() != Body(d) || c.Kind() != KindDecisions || !c.LeaderOnly() {
		t.Fatalf("decisions: %v %q %v", c.Body(), c.Kind(), c.LeaderOnly())
	}
	c.Heartbeat = &Heartbeat{}
	if c.Body() != nil || c.Kind() != "" || c.LeaderOnly() {
		t.Fatalf("two bodies: %v %q %v", c.Body(), c.Kind(), c.LeaderOnly())
	}
}

// wakesSchedulerBefore is consensus.wakesScheduler as it was before the
// kinds were defined in one place, the reference for WakesScheduler.
func wakesSchedulerBefore(res *Result) bool {
	if !res.Applied() {
		return false
	}
	switch res.Kind {
	case KindHeartbeat, KindCheckpoint, KindDecisions:
		return false
	case KindTaskStarted:
		// Changed in session 8 (issue 22): a start frees and queues
		// nothing; the leader's tick covers the run's growing time.
		return false
	case KindSchedule:
		// Added with the kind: a trigger is a pass, like decisions.
		return false
	case KindForgetTasks:
		// Added with the kind: only terminal tasks leave.
		return false
	case KindMachineLoad:
		// Added with the kind: a load changes predictions only.
		return false
	case KindReports:
		for _, it := range res.Reports {
			if it.Err == nil && it.Kind != KindCheckpoint && it.Kind != KindTaskStarted {
				return true
			}
		}
		return false
	}
	return true
}

// TestWakesScheduler: WakesScheduler answers as the consensus layer's own
// rule did, for every kind, verdict and mix of batch items Apply can give.
func TestWakesScheduler(t *testing.T) {
	refused := &Error{Code: CodeBadState}
	// The kinds an item's verdict can name: the report kinds, and none
	// for an item without exactly one body.
	itemSets := [][]ReportResult{nil, {}}
	for _, a := range append(slices.Clone(reportBodies.kinds), "") {
		for _, b := range []Kind{KindCheckpoint, KindTaskEnded} {
			for _, errA := range []*Error{nil, refused} {
				for _, errB := range []*Error{nil, refused} {
					itemSets = append(itemSets, []ReportResult{{Kind: a, Err: errA}, {Kind: b, Err: errB}})
				}
			}
		}
	}
	kinds := append(slices.Clone(commandBodies.kinds), "", "unknown")
	for _, k := range kinds {
		for _, skipped := range []bool{false, true} {
			for _, err := range []*Error{nil, refused} {
				for _, items := range itemSets {
					res := Result{Kind: k, Skipped: skipped, Err: err, Reports: items}
					if got, want := WakesScheduler(&res), wakesSchedulerBefore(&res); got != want {
						t.Errorf("%+v: WakesScheduler %v, want %v", res, got, want)
					}
				}
			}
		}
	}
	// A few cases spelled out, so that the rule is readable here too.
	for _, tc := range []struct {
		name string
		res  Result
		want bool
	}{
		{"applied submit", Result{Kind: KindSubmitTasks}, true},
		{"refused submit", Result{Kind: KindSubmitTasks, Err: refused}, false},
		{"skipped submit", Result{Kind: KindSubmitTasks, Skipped: true}, false},
		{"heartbeat", Result{Kind: KindHeartbeat}, false},
		{"checkpoint", Result{Kind: KindCheckpoint}, false},
		{"decisions", Result{Kind: KindDecisions}, false},
		{"schedule", Result{Kind: KindSchedule}, false},
		{"batch of checkpoints", Result{Kind: KindReports, Reports: []ReportResult{{Kind: KindCheckpoint}, {Kind: KindCheckpoint}}}, false},
		{"batch with an accepted end", Result{Kind: KindReports, Reports: []ReportResult{{Kind: KindCheckpoint}, {Kind: KindTaskEnded}}}, true},
		{"batch with a refused end", Result{Kind: KindReports, Reports: []ReportResult{{Kind: KindCheckpoint}, {Kind: KindTaskEnded, Err: refused}}}, false},
		{"start", Result{Kind: KindTaskStarted}, false},
		{"batch of starts", Result{Kind: KindReports, Reports: []ReportResult{{Kind: KindTaskStarted}, {Kind: KindTaskStarted}}}, false},
		{"batch with a start and an end", Result{Kind: KindReports, Reports: []ReportResult{{Kind: KindTaskStarted}, {Kind: KindTaskEnded}}}, true},
		{"batch with a malformed item", Result{Kind: KindReports, Reports: []ReportResult{{Err: &Error{Code: CodeMalformed}}}}, false},
	} {
		if got := WakesScheduler(&tc.res); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
