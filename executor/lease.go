package executor

import (
	"fmt"
	"os"
	"time"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
)

// SetLease sets the lease of the runs started from now on, and how the
// peer knows it is in contact with its federation (nil: always). The peer
// sets it once, before it starts tasks (runner.New does). See
// docs/EXECUTOR.md, "The run lease".
func (e *ProcessExecutor) SetLease(lease time.Duration, contact func() time.Time) {
	e.lease.Store(int64(max(lease, 0)))
	if contact != nil {
		e.contact.Store(&contact)
	} else {
		e.contact.Store(nil)
	}
}

// renewLeases keeps the runs' leases alive, until stop is closed: a
// renewal to the supervisor every Lease/4 while the peer is in contact
// with its federation (Contact no older than Lease). One renewal covers
// every run. A peer that is stopped (SIGSTOP, a hung machine) or cut off
// renews nothing, and the supervisor kills each run when its lease has
// passed since the last renewal: at most 2 × Lease after the last
// contact, at most Lease after the peer stopped. A dead peer's socket
// closes, which kills every run at once.
func (e *ProcessExecutor) renewLeases(stop <-chan struct{}) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		lease := time.Duration(e.lease.Load())
		if lease <= 0 {
			t.Reset(250 * time.Millisecond) // SetLease may set one later
			continue
		}
		if e.inContact(lease) {
			e.supMu.Lock()
			sup := e.sup
			e.supMu.Unlock()
			if sup != nil {
				_ = sup.Renew() // a dead supervisor is replaced at the next start
			}
		}
		t.Reset(lease / 4)
	}
}

// inContact reports whether the peer confirmed contact with its federation
// within d.
func (e *ProcessExecutor) inContact(d time.Duration) bool {
	c := e.contact.Load()
	if c == nil {
		return true
	}
	return time.Since((*c)()) < d
}

// supervisor is the executor's run supervisor, started on first use and
// again after one died (its runs died with it, and ended as such).
func (e *ProcessExecutor) supervisor() (*supervise.Client, error) {
	e.supMu.Lock()
	defer e.supMu.Unlock()
	if e.sup != nil {
		select {
		case <-e.sup.Dead():
			e.log.Warn("executor: the run supervisor died; starting a new one", "pid", e.sup.Pid())
			e.sup = nil
		default:
			return e.sup, nil
		}
	}
	if e.supClosed {
		return nil, fmt.Errorf("executor closed")
	}
	sup, err := supervise.StartClient(e.cfg.SupervisorPath, os.Stderr)
	if err != nil {
		return nil, err
	}
	// The first renewal goes out at once: a run opened now is covered from
	// its opening anyway.
	e.sup = sup
	return sup, nil
}

// closeSupervisor ends the supervisor once no run is left.
func (e *ProcessExecutor) closeSupervisor() {
	e.supMu.Lock()
	sup := e.sup
	e.sup, e.supClosed = nil, true
	e.supMu.Unlock()
	if sup != nil {
		sup.Close()
	}
}
