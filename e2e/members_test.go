package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestMembersRemoveNeedsTheFederation: three real peers. `peer members`
// names every member's organisation, all reachable voters. One
// organisation cannot take another's peer out: uni-b's `peer members
// remove` of uni-c's peer records a vote and uni-c stays a member; uni-b
// voting again, or naming its own peer, is refused. uni-a's vote makes
// two of three: uni-c's peer is taken out.
func TestMembersRemoveNeedsTheFederation(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	a := newOrg(t, root, "uni-a", initOptions{machines: machinesFile("a", 1, 10, 40), config: fastConfig})
	a.start(t)
	boot := a.proc.bootstrap(t)
	b := newOrg(t, root, "uni-b", initOptions{machines: machinesFile("b", 1, 10, 40), secret: a.secret(), config: fastConfig})
	c := newOrg(t, root, "uni-c", initOptions{machines: machinesFile("c", 1, 10, 40), secret: a.secret(), config: fastConfig})
	b.start(t, "--bootstrap", boot, "--invitation", a.invite(t, "uni-b"))
	c.start(t, "--bootstrap", boot, "--invitation", a.invite(t, "uni-c"))
	for _, g := range []*org{a, b, c} {
		waitFor(t, waitTimeout, g.name+" sees the federation formed", func() (bool, string) {
			msg := formed(g.status(t), 3)
			return msg == "", msg
		})
	}
	type membersJSON struct {
		Voters          int `json:"voters"`
		VotersReachable int `json:"voters_reachable"`
		Members         []struct {
			ID        string `json:"id"`
			Org       string `json:"org"`
			Reachable bool   `json:"reachable"`
		} `json:"members"`
	}
	members := func(g *org) membersJSON {
		var m membersJSON
		cliJSON(t, &m, "members", "--data", g.data)
		return m
	}
	waitFor(t, waitTimeout, "every member reachable, by organisation", func() (bool, string) {
		m := members(b)
		orgs := map[string]bool{}
		for _, x := range m.Members {
			orgs[x.Org] = x.Reachable
		}
		return m.Voters == 3 && m.VotersReachable == 3 && orgs["uni-a"] && orgs["uni-b"] && orgs["uni-c"], fmt.Sprintf("%+v", m)
	})
	cID, bID := c.status(t).Self, b.status(t).Self

	if r := b.cli(t, "members", "remove", bID); r.code != 1 || !strings.Contains(r.stderr, "peer leave") {
		t.Fatalf("uni-b removing its own peer through members remove:\n%v", r)
	}
	r := b.cli(t, "members", "remove", cID)
	if r.code != 0 || !strings.Contains(r.stdout, "vote recorded to remove "+cID+" (uni-c)") {
		t.Fatalf("uni-b's vote:\n%v", r)
	}
	if m := members(a); len(m.Members) != 3 {
		t.Fatalf("one organisation's vote took a member out: %+v", m)
	}
	if r := b.cli(t, "members", "remove", cID); r.code != 1 || !strings.Contains(r.stderr, "conflict") {
		t.Fatalf("uni-b voting twice:\n%v", r)
	}
	var v struct {
		Removed bool `json:"removed"`
	}
	if r := a.cli(t, "members", "remove", cID, "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil || !v.Removed {
		t.Fatalf("uni-a's vote, the second of three:\n%v", r)
	}
	waitFor(t, waitTimeout, "uni-c's peer taken out", func() (bool, string) {
		m := members(a)
		return len(m.Members) == 2 && m.Voters == 2, fmt.Sprintf("%+v", m)
	})
}
