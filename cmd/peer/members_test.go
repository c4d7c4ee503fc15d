package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
)

// peer members and peer recover against a real single peer: members lists
// it with its organisation, as a reachable voter; removing it through
// members remove is refused (a peer leaves by itself). recover refuses a
// running peer and every bad input (exit 2), then on the stopped peer a dry
// run lists the members and a recovery to itself rewrites the state at
// the index and hash peer verify replays from its data.
func TestMembersAndRecoverCommands(t *testing.T) {
	ctx, p := startPeer(t)
	self := p.Node.ID().String()

	code, out, errs := runCLI(t, "members", "--json", "--data", p.DataDir)
	var v api.MembersView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("members: exit %d: %s %s", code, out, errs)
	}
	if v.Leader != self || v.Observer != self || v.Voters != 1 || v.VotersReachable != 1 || len(v.Members) != 1 {
		t.Fatalf("members %+v", v)
	}
	if m := v.Members[0]; m.ID != self || m.Org != "alpha" || m.Suffrage != api.SuffrageVoter || !m.Leader || !m.Reachable || m.LastContactMs != 0 {
		t.Fatalf("member %+v", m)
	}
	code, out, _ = runCLI(t, "members", "--data", p.DataDir)
	if code != 0 || !strings.Contains(out, "voters reachable: 1 of 1") || !strings.Contains(out, "alpha") || !strings.Contains(out, "LAST CONTACT") {
		t.Fatalf("members table: exit %d:\n%s", code, out)
	}
	if code, _, errs := runCLI(t, "members", "remove", self, "--data", p.DataDir); code != 1 || !strings.Contains(errs, "peer leave") {
		t.Fatalf("members remove of this peer: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "members", "remove", "not-a-peer!", "--data", p.DataDir); code != 2 || !strings.Contains(errs, "bad_request") {
		t.Fatalf("members remove of garbage: exit %d: %s", code, errs)
	}

	if code, _, errs := runCLI(t, "recover", "--data", p.DataDir, self); code != 1 || !strings.Contains(errs, "stop the peer first") {
		t.Fatalf("recover of a running peer: exit %d: %s", code, errs)
	}
	if err := p.Node.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stranger := "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
	for _, c := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"no data", []string{"recover", self}, 2, "--data is required"},
		{"no survivors", []string{"recover", "--data", p.DataDir}, 2, "name the surviving peers"},
		{"survivors and dry run", []string{"recover", "--data", p.DataDir, "--dry-run", self}, 2, "name the surviving peers"},
		{"not a peer ID", []string{"recover", "--data", p.DataDir, self, "bogus"}, 2, `survivor 2, "bogus": not a peer ID`},
		{"not a data directory", []string{"recover", "--data", t.TempDir(), self}, 2, "no identity"},
		{"not a member", []string{"recover", "--data", p.DataDir, self, stranger}, 1, "is not a member"},
		{"without itself", []string{"recover", "--data", p.DataDir, stranger}, 1, "not among the survivors"},
	} {
		if code, _, errs := runCLI(t, c.args...); code != c.wantCode || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d: %s; want %d and %q", c.name, code, errs, c.wantCode, c.want)
		}
	}
	// What the data holds, replayed by peer verify: the recovery keeps it.
	code, out, errs = runCLI(t, "verify", "--data", p.DataDir, "--json")
	var live struct {
		Index uint64 `json:"index"`
		Hash  string `json:"hash"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &live) != nil || live.Hash == "" {
		t.Fatalf("verify: exit %d: %s %s", code, out, errs)
	}
	code, out, errs = runCLI(t, "recover", "--data", p.DataDir, "--dry-run")
	if code != 0 || !strings.Contains(out, self+" voter") || !strings.Contains(out, "nothing changed") {
		t.Fatalf("dry run: exit %d: %s %s", code, out, errs)
	}
	code, out, errs = runCLI(t, "recover", "--data", p.DataDir, self, "--json")
	var res struct {
		LastIndex uint64
		Hash      string
		After     []string
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("recover: exit %d: %s %s", code, out, errs)
	}
	if res.Hash != live.Hash || res.LastIndex != live.Index || len(res.After) != 1 || res.After[0] != self {
		t.Fatalf("recovered %+v; the replay of its data ends at %d, hash %s", res, live.Index, live.Hash)
	}
	// The recovered data is a consistent peer's: verify replays it clean.
	if code, out, errs := runCLI(t, "verify", "--data", p.DataDir); code != 0 {
		t.Fatalf("verify after recovery: exit %d: %s %s", code, out, errs)
	}
}
