package ledger

import (
	"reflect"
	"testing"
)

// TestOrgAgreesWithOrgs: Org counts one organisation's machines and tasks
// itself (it no longer builds every organisation's record); what it
// returns must be that organisation's entry of Orgs, in a state with
// machines up and lost and tasks in several states. OrgPeer names the
// registered peer and the removal without them.
func TestOrgAgreesWithOrgs(t *testing.T) {
	f := base(t)
	f.must(decide("uni-a", 2200, alloc("uni-a-1", "uni-a/m1"), alloc("uni-b-1", "uni-a/m2")))
	f.must(started("uni-a", "uni-a-1", "uni-a/m1", 2300))
	f.must(lost("uni-b", "uni-b/x1", 2400))
	f.must(register("uni-c", 100_000))
	all := f.l.Orgs()
	if len(all) != 3 {
		t.Fatalf("Orgs: %d organisations, want 3", len(all))
	}
	for _, want := range all {
		got, ok := f.l.Org(want.Name)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("Org(%q) = %+v, %v; Orgs has %+v", want.Name, got, ok, want)
		}
		peer, removed, ok := f.l.OrgPeer(want.Name)
		if !ok || peer != want.Peer || removed {
			t.Errorf("OrgPeer(%q) = %q, %v, %v; want %q, false, true", want.Name, peer, removed, ok, want.Peer)
		}
	}
	if o := all[0]; o.Running != 1 || o.Queued != 2 || o.MachinesUp != 2 {
		t.Errorf("uni-a: running %d queued %d machines up %d; want 1, 2, 2", o.Running, o.Queued, o.MachinesUp)
	}
	if _, ok := f.l.Org("uni-x"); ok {
		t.Error("Org of an unregistered organisation found")
	}
	if _, _, ok := f.l.OrgPeer("uni-x"); ok {
		t.Error("OrgPeer of an unregistered organisation found")
	}
}
