package runner

import (
	"maps"
	"testing"
)

// TestGangEnv: a two-part 8-CPU gang (4 CPUs on each of two machines)
// gives each part both hosts, its rank and an Open MPI hostfile; bad
// gangs are refused.
func TestGangEnv(t *testing.T) {
	parts := []GangPart{{Host: "node-1", CPUs: 4}, {Host: "node-2", CPUs: 4}}
	env, hf, err := GangEnv(parts, 1, "/tasks/t/hostfile")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"COOPGRID_HOSTS": "node-1,node-2", "COOPGRID_GANG_RANK": "1", "COOPGRID_GANG_SIZE": "2", "COOPGRID_HOSTFILE": "/tasks/t/hostfile"}
	if !maps.Equal(env, want) {
		t.Fatalf("env %v, want %v", env, want)
	}
	if string(hf) != "node-1 slots=4\nnode-2 slots=4\n" {
		t.Fatalf("hostfile %q", hf)
	}
	for _, bad := range []struct {
		parts []GangPart
		rank  int
	}{
		{parts[:1], 0},
		{parts, 2},
		{parts, -1},
		{[]GangPart{{Host: "a b", CPUs: 1}, {Host: "c", CPUs: 1}}, 0},
		{[]GangPart{{Host: "a,b", CPUs: 1}, {Host: "c", CPUs: 1}}, 0},
		{[]GangPart{{Host: "", CPUs: 1}, {Host: "c", CPUs: 1}}, 0},
		{[]GangPart{{Host: "a", CPUs: 0}, {Host: "c", CPUs: 1}}, 0},
	} {
		if _, _, err := GangEnv(bad.parts, bad.rank, "hf"); err == nil {
			t.Errorf("GangEnv(%+v, %d) accepted", bad.parts, bad.rank)
		}
	}
}
