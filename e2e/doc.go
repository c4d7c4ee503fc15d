// Package e2e holds coopgrid's end-to-end tests: they build the `peer`
// binary from this repository once per test run and drive real `peer run`
// processes on loopback through the documented CLI only (init, run,
// submit, tasks, task, logs, cancel, machines, orgs, ledger, limit set,
// status, members, recover, leave), the way an institution's sysadmin would. They also run
// examples/federation.sh.
//
// The package has no non-test code; `go test -short ./e2e` skips it.
package e2e
