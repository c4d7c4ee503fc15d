package apitest

import (
	"context"
	"testing"
)

func TestNewSeeded(t *testing.T) {
	b, err := NewSeeded(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, idx := b.HashAndIndex()
	if idx != 8 {
		t.Errorf("applied index %d, want 8", idx)
	}
	orgs, _ := b.Orgs(context.Background())
	if len(orgs) != 2 || orgs[0].Queued != 1 || orgs[0].Running != 1 || orgs[0].Done != 1 || orgs[0].PIW != 300 || orgs[1].PIW != 200 {
		t.Errorf("orgs %+v", orgs)
	}
	nm, _ := b.Metrics(context.Background())
	if nm.DecisionsAccepted != 3 || nm.DecisionsRejected != 1 || nm.SchedulingPasses != 1 {
		t.Errorf("node metrics %+v", nm)
	}
}
