package ledger

import (
	"slices"
	"testing"
)

// TestTimelineHandWorked: uni-b's task runs on uni-a/m2 (2000 MFLOPS,
// 150 W) from 3000 to 5000 ms and uses 7 J; uni-a's runs on uni-a/m1
// (1000 MFLOPS, 100 W) from 4000 ms and is still running. Sampled at 2500,
// 3000, 4500, 5000 and 6000 ms.
func TestTimelineHandWorked(t *testing.T) {
	f := base(t)
	placeAndStart(f, "uni-b-1", "uni-a/m2", 3000)
	placeAndStart(f, "uni-a-1", "uni-a/m1", 4000)
	f.must(ended("uni-a", "uni-b-1", "uni-a/m2", 5000, 7000, false))
	// Placed at 5500, not started: it counts at the last time only.
	if r := f.must(decide("uni-b", 5500, alloc("uni-b-2", "uni-b/x1"))); r.Decisions[0].Err != nil {
		t.Fatal(r.Decisions[0].Err)
	}
	times := []int64{2500, 3000, 4500, 5000, 6000}
	got, err := f.l.Timeline(times)
	if err != nil {
		t.Fatal(err)
	}
	want := []OrgTimeline{
		{Org: "uni-a", AllocatedMFLOPS: []int64{0, 0, 1000, 1000, 1000}, PIMilliW: []int64{0, 0, 100_000, 100_000, 100_000},
			UserMilliJ: []int64{0, 0, 0, 0, 0}, OwnerMilliJ: []int64{0, 0, 0, 7000, 7000}},
		{Org: "uni-b", AllocatedMFLOPS: []int64{0, 2000, 2000, 0, 1500}, PIMilliW: []int64{0, 150_000, 150_000, 0, 120_000},
			UserMilliJ: []int64{0, 0, 0, 7000, 7000}, OwnerMilliJ: []int64{0, 0, 0, 0, 0}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d organisations, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		for _, c := range []struct {
			name      string
			got, want []int64
		}{
			{"allocated", g.AllocatedMFLOPS, w.AllocatedMFLOPS}, {"PI", g.PIMilliW, w.PIMilliW},
			{"user", g.UserMilliJ, w.UserMilliJ}, {"owner", g.OwnerMilliJ, w.OwnerMilliJ},
		} {
			if g.Org != w.Org || !slices.Equal(c.got, c.want) {
				t.Errorf("%s %s = %v, want %s %v", g.Org, c.name, c.got, w.Org, c.want)
			}
		}
		// The last sample is now: it agrees with the live figures.
		o := mustOrg(t, f.l, g.Org)
		last := len(times) - 1
		if g.DP[last] == nil || o.DP == nil || *g.DP[last] != *o.DP || g.DP[0] == nil || *g.DP[0] != -1 {
			t.Errorf("%s: DP first %v last %v, want -1 and the live %v", g.Org, g.DP[0], g.DP[last], o.DP)
		}
		if g.AllocatedMFLOPS[last] != o.AllocatedMFLOPS || g.PIMilliW[last] != o.PIMilliW ||
			g.UserMilliJ[last] != o.Energy.UserMilliJ || g.OwnerMilliJ[last] != o.Energy.OwnerMilliJ() {
			t.Errorf("%s: last sample %d MFLOPS %d mW %d/%d mJ, live %+v", g.Org, g.AllocatedMFLOPS[last], g.PIMilliW[last],
				g.UserMilliJ[last], g.OwnerMilliJ[last], o)
		}
	}
}

func TestTimelineRefusesBadTimes(t *testing.T) {
	f := base(t)
	before := f.l.Hash()
	for name, times := range map[string][]int64{
		"not increasing": {1000, 1000},
		"backwards":      {2000, 1000},
		"too many":       make([]int64, MaxTimelinePoints+1),
	} {
		if _, err := f.l.Timeline(times); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if f.l.Hash() != before {
		t.Fatal("Timeline changed the state")
	}
}

func TestTimelineTimes(t *testing.T) {
	cases := []struct {
		now, window int64
		points      int
		want        []int64
	}{
		{10_000, 1000, 5, []int64{9000, 9250, 9500, 9750, 10_000}},
		{10_000, 1000, 1, []int64{10_000}},
		{10_000, 0, 3, []int64{10_000}},
		{10_000, 2, 5, []int64{9998, 9999, 10_000}}, // no repeated time
		{10_000, 1000, 0, nil},
	}
	for _, c := range cases {
		if got := TimelineTimes(c.now, c.window, c.points); !slices.Equal(got, c.want) {
			t.Errorf("TimelineTimes(%d, %d, %d) = %v, want %v", c.now, c.window, c.points, got, c.want)
		}
	}
}
