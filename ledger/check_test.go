package ledger

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// TestCheckAgreesWithApply drives random sequences and, before each
// command that decodes, asks Check: it must change nothing (hash) and give
// exactly the error Apply then gives (code and message), nil when Apply
// applies the command. For batches, Apply's error is the envelope's, which
// is what Check judges.
func TestCheckAgreesWithApply(t *testing.T) {
	steps := 2000
	if testing.Short() {
		steps = 400
	}
	pol, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	refused := map[Code]int{}
	for _, seed := range []uint64{4, 5} {
		f := newFed(t)
		g := &gen{r: rand.New(rand.NewPCG(seed, 7)), l: f.l, now: 1_000_000, pol: pol}
		for i := 0; i < steps; i++ {
			data := g.encode(g.command())
			c, derr := DecodeCommand(data)
			var cerr *Error
			if derr == nil {
				before := f.l.Hash()
				cerr = f.l.Check(&c)
				if h := f.l.Hash(); h != before {
					t.Fatalf("seed %d step %d: Check(%s) changed the hash", seed, i, c.Kind())
				}
			}
			r := f.raw(data)
			if derr != nil {
				continue
			}
			if !reflect.DeepEqual(cerr, r.Err) {
				t.Fatalf("seed %d step %d: %s: Check says %v, Apply %v", seed, i, c.Kind(), cerr, r.Err)
			}
			if cerr != nil {
				refused[cerr.Code]++
			}
		}
	}
	t.Logf("refused by Check %v", refused)
	for _, c := range []Code{CodeNotOwner, CodeUnknownTask, CodeBadState, CodeExists, CodeUnknownOrg} {
		if refused[c] == 0 {
			t.Errorf("Check never refused with %s", c)
		}
	}
}

// TestCheckRefusesLikeApply pins the rejections the issue names: the
// answer of the dry run is the one Apply gave, and nothing changes.
func TestCheckRefusesLikeApply(t *testing.T) {
	setup := func(t *testing.T) *fed {
		f := base(t)
		f.must(decide("uni-a", 3000, alloc("uni-a-1", "uni-a/m1")))
		return f
	}
	cancelOther := act("uni-b", 4000)
	cancelOther.CancelTask = &CancelTask{Task: "uni-a-1"}
	lowLimit := act("uni-a", 4000)
	lowLimit.SetLimit = &SetLimit{LimitMilliW: 1000}
	otherPeer := submit("uni-a", 4000, 100)
	otherPeer.Peer = peerOf("uni-b")
	newVersion := submit("uni-a", 4000, 100)
	newVersion.V = MaxCommandVersion() + 1
	cases := []struct {
		name string
		cmd  Command
		code Code
	}{
		{"cancel of another organisation's task", cancelOther, CodeNotOwner},
		{"limit below PI", lowLimit, CodeLimitExceeded},
		{"peer not registered for the organisation", otherPeer, CodeNotOwner},
		{"another command version", newVersion, CodeBadVersion},
		{"report on a task never started", ended("uni-a", "uni-a-2", "uni-a/m1", 4000, 5, false), CodeBadState},
		{"unknown organisation", submit("uni-z", 4000, 100), CodeUnknownOrg},
		{"accepted", submit("uni-a", 4000, 100), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			before := f.l.Hash()
			cerr := f.l.Check(&tc.cmd)
			if f.l.Hash() != before {
				t.Fatal("Check changed the state")
			}
			if got := CodeOf(errOrNil(cerr)); got != tc.code {
				t.Fatalf("Check: code %q (%v), want %q", got, cerr, tc.code)
			}
			if tc.cmd.V != CommandVersion {
				return // Apply refuses it at decoding, with its own words
			}
			r := f.apply(tc.cmd)
			if !reflect.DeepEqual(cerr, r.Err) {
				t.Fatalf("Check says %v, Apply %v", cerr, r.Err)
			}
		})
	}
}
