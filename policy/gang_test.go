package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func gm(id string, owner int, cpus int64) GangMachine {
	return GangMachine{ID: id, Owner: owner, Free: Resources{CPUs: cpus}, Capacity: Resources{CPUs: 4}}
}

// TestPlaceGang: hand-checked placements of gangs of 4-CPU parts.
func TestPlaceGang(t *testing.T) {
	cases := []struct {
		name     string
		parts    int
		machines []GangMachine
		want     []string // nil: not placed
	}{
		{"both machines of one peer free", 2, []GangMachine{gm("a/1", 0, 4), gm("a/2", 0, 4)}, []string{"a/1", "a/2"}},
		{"one of them busy: nothing starts", 2, []GangMachine{gm("a/1", 0, 4), gm("a/2", 0, 3)}, nil},
		{"never across two organisations", 2, []GangMachine{gm("a/1", 0, 4), gm("b/1", 1, 4)}, nil},
		{"the owner whose gang completes first in the ranking", 2,
			[]GangMachine{gm("a/1", 0, 4), gm("b/1", 1, 4), gm("b/2", 1, 4), gm("a/2", 0, 4)}, []string{"b/1", "b/2"}},
		{"busy machines skipped, order kept", 3,
			[]GangMachine{gm("a/3", 0, 8), gm("a/1", 0, 0), gm("a/2", 0, 4), gm("a/4", 0, 4)}, []string{"a/3", "a/2", "a/4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := PlaceGang(tc.parts, Resources{CPUs: 4}, tc.machines)
			if err != nil || ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v %v %v, want %v", got, ok, err, tc.want)
			}
		})
	}
	for _, bad := range []struct {
		parts int
		ms    []GangMachine
	}{{1, nil}, {MaxGangSize + 1, nil}, {2, []GangMachine{gm("a/1", 0, 4), gm("a/1", 0, 4)}}} {
		if _, _, err := PlaceGang(bad.parts, Resources{CPUs: 4}, bad.ms); err == nil {
			t.Errorf("PlaceGang(%d, %v) accepted", bad.parts, bad.ms)
		}
	}
}

// referencePlaceGang is PlaceGang stated as its definition: among every
// set of parts distinct machines, all of one owner and each fitting a
// part, the one whose least preferred machine is most preferred, then the
// lexicographically first; found by trying every subset.
func referencePlaceGang(parts int, req Resources, ms []GangMachine) ([]string, bool) {
	var best []int
	var pick func(start int, cur []int)
	pick = func(start int, cur []int) {
		if len(cur) == parts {
			for _, i := range cur {
				m := ms[i]
				if m.Owner != ms[cur[0]].Owner || !fitsIn(req.Request(), m.Free, m.Capacity.Capacity()) {
					return
				}
			}
			if best == nil || cur[parts-1] < best[parts-1] || cur[parts-1] == best[parts-1] && slices.Compare(cur, best) < 0 {
				best = slices.Clone(cur)
			}
			return
		}
		for i := start; i < len(ms); i++ {
			pick(i+1, append(cur, i))
		}
	}
	pick(0, nil)
	if best == nil {
		return nil, false
	}
	ids := make([]string, parts)
	for k, i := range best {
		ids[k] = ms[i].ID
	}
	return ids, true
}

// TestPlaceGangReference: on random machine sets, PlaceGang agrees with
// the reference, never places two parts on one machine or on two owners'
// machines, and places only on machines where a part fits.
func TestPlaceGangReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 2))
	placed := 0
	for n := 0; n < 500; n++ {
		var ms []GangMachine
		for i := range 2 + r.IntN(8) {
			ms = append(ms, GangMachine{ID: string(rune('a'+i)) + "/m", Owner: r.IntN(3),
				Free: Resources{CPUs: int64(r.IntN(5)), GPUs: int64(r.IntN(2))}, Capacity: Resources{CPUs: 4, GPUs: 1}})
		}
		parts := 2 + r.IntN(3)
		req := Resources{CPUs: 1 + int64(r.IntN(4)), GPUs: int64(r.IntN(2))}
		got, ok, err := PlaceGang(parts, req, ms)
		if err != nil {
			t.Fatal(err)
		}
		want, wok := referencePlaceGang(parts, req, ms)
		if ok != wok || !slices.Equal(got, want) {
			t.Fatalf("case %d: %d parts of %+v on %+v: got %v %v, reference %v %v", n, parts, req, ms, got, ok, want, wok)
		}
		if ok {
			placed++
		}
		owners := map[int]bool{}
		for _, id := range got {
			i := slices.IndexFunc(ms, func(m GangMachine) bool { return m.ID == id })
			owners[ms[i].Owner] = true
			if !fitsIn(req.Request(), ms[i].Free, ms[i].Capacity) {
				t.Fatalf("case %d: part on %s, where it does not fit", n, id)
			}
		}
		if ok && (len(owners) != 1 || len(got) != parts || len(slices.Compact(slices.Sorted(slices.Values(got)))) != parts) {
			t.Fatalf("case %d: placement %v spans %d owners or repeats a machine", n, got, len(owners))
		}
	}
	if placed < 50 || placed > 450 {
		t.Fatalf("%d of 500 random gangs placed: the cases do not exercise both outcomes", placed)
	}
}
