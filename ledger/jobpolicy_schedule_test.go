package ledger

import (
	"reflect"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// TestScheduleTriggerFollowsTheJobPolicy: once the federation votes a
// backfilling job policy, a schedule trigger applies what that policy's
// live pass (policy.LiveBackfill) decides on the view, and not EHOSEP's;
// before the vote it applies EHOSEP's.
func TestScheduleTriggerFollowsTheJobPolicy(t *testing.T) {
	for _, job := range []string{"ehosep", "fcfs", "easy", "conservative"} {
		t.Run(job, func(t *testing.T) {
			f := schedFed(t, schedRules("ehosep", 300_000))
			ehosep := expectedPass(t, f.l, "ehosep", 5000, 300_000)
			if job != DefaultJobPolicy {
				f.must(policyVote("uni-a", job))
				f.must(policyVote("uni-b", job))
			}
			if got := f.l.JobPolicy().Policy; got != job {
				t.Fatalf("job policy %s, want %s", got, job)
			}
			want := ehosep
			if job != DefaultJobPolicy {
				st, vm := f.l.PolicyView(5000, 300)
				pds, err := policy.LiveBackfill{Mode: job}.Schedule(st)
				if err != nil {
					t.Fatal(err)
				}
				if want, err = vm.Decisions(pds); err != nil {
					t.Fatal(err)
				}
				if reflect.DeepEqual(want, ehosep) {
					t.Fatalf("%s decides as ehosep here: the test proves nothing", job)
				}
			}
			r := f.must(trigger("uni-b", 5000))
			if got := decisionsOf(r); !reflect.DeepEqual(got, want) || r.AcceptedDecisions() != len(want) {
				t.Fatalf("trigger under %s decided %+v (%d accepted), want %+v", job, got, r.AcceptedDecisions(), want)
			}
		})
	}
}
