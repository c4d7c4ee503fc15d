package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
)

// peer job-policy against a real single peer: it shows the default; a
// vote of the only organisation is its majority and puts the policy in
// force, which peer status then prints; a vote for the policy in force is
// refused (exit 1, conflict), a name that is no policy is bad input.
func TestJobPolicyCommand(t *testing.T) {
	_, p := startPeer(t)

	code, out, errs := runCLI(t, "job-policy", "--data", p.DataDir)
	if code != 0 || !strings.Contains(out, "job policy ehosep (the default") {
		t.Fatalf("job-policy: exit %d: %s %s", code, out, errs)
	}
	code, out, errs = runCLI(t, "job-policy", "easy", "--json", "--data", p.DataDir)
	var v api.JobPolicyView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Policy != "easy" || len(v.Voters) != 1 || v.Voters[0] != "alpha" {
		t.Fatalf("job-policy easy: exit %d: %s %s", code, out, errs)
	}
	if code, out, _ := runCLI(t, "status", "--data", p.DataDir); code != 0 || !strings.Contains(out, "job policy  easy") {
		t.Fatalf("status: exit %d:\n%s", code, out)
	}
	if code, _, errs := runCLI(t, "job-policy", "easy", "--data", p.DataDir); code != 1 || !strings.Contains(errs, "conflict") {
		t.Fatalf("a vote for the policy in force: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "job-policy", "sjf", "--data", p.DataDir); code != 2 || !strings.Contains(errs, "bad_request") {
		t.Fatalf("a vote for no policy: exit %d: %s", code, errs)
	}
}
