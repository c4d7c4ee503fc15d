package main

import (
	"context"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// machineView is machine id as b lists it; the test fails when b has none.
func machineView(t *testing.T, b *apitest.Backend, id string) api.MachineView {
	t.Helper()
	ms, err := b.Machines(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == id {
			return m
		}
	}
	t.Fatalf("no machine %s", id)
	return api.MachineView{}
}

// machinesCase is one `peer machines ARGS --data DATA` against a backend:
// the exit code, the start of stdout and a part of stderr it must give,
// and a machine flag (drained, reclaimed) of the named machines after it.
type machinesCase struct {
	name      string
	data      string // "" : the test's data directory
	args      []string
	code      int
	out, errs string
	after     map[string]bool
}

// runMachinesCases runs each case as a subtest against b, through the data
// directory data unless the case names another: a command refused (exit
// code not 0) must leave b's ledger as it was; after each, flag (called
// what) of every machine in the case's after must be as it says.
func runMachinesCases(t *testing.T, b *apitest.Backend, data, what string, flag func(api.MachineView) bool, cases []machinesCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := data
			if tc.data != "" {
				dir = tc.data
			}
			before, _ := b.Ledger(context.Background())
			code, out, errs := runCLI(t, append(append([]string{"machines"}, tc.args...), "--data", dir)...)
			if code != tc.code || !strings.HasPrefix(out, tc.out) || !strings.Contains(errs, tc.errs) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errs, tc.code, tc.out, tc.errs)
			}
			if tc.code != 0 {
				if after, _ := b.Ledger(context.Background()); after.StateHash != before.StateHash {
					t.Fatalf("a refused %s changed the ledger", tc.args[0])
				}
			}
			for id, want := range tc.after {
				if got := flag(machineView(t, b, id)); got != want {
					t.Fatalf("%s %s %v, want %v", id, what, got, want)
				}
			}
		})
	}
}
