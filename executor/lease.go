package executor

import (
	"encoding/json"
	"github.com/coopgrid/coopgrid/executor/internal/supervise"
	"io"
	"os"
	"syscall"
	"time"
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

// renewLease keeps a run's lease alive: a byte on the supervisor's lease
// pipe every Lease/4 while the peer is in contact with its federation
// (Contact no older than Lease). A peer that is stopped (SIGSTOP, a hung
// machine) or cut off writes nothing, and the supervisor kills the run when
// Lease has passed since the last byte: at most 2 × Lease after the last
// contact, at most Lease after the peer stopped. The returned function
// stops the renewals; the pipe itself is closed by the caller (its EOF
// also kills the run, which is what a dead peer must cause).
func (e *ProcessExecutor) renewLease(w *os.File) (stop func()) {
	lease := time.Duration(e.lease.Load())
	if lease <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(lease / 4)
		defer t.Stop()
		for {
			if e.inContact(lease) {
				if _, err := w.Write([]byte{1}); err != nil {
					return
				}
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done) }
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

// taskStatus is how the task ended: from the supervisor's report when it
// wrote one, otherwise (the supervisor was killed with its group: a stop,
// a timeout) from the supervisor's own wait status. cpu is the task's CPU
// time, children included.
func taskStatus(sup *os.ProcessState, report *os.File) (syscall.WaitStatus, time.Duration, supervise.Status) {
	var st supervise.Status
	// The supervisor is gone, so the pipe's only writer is; a deadline
	// guards against a task that somehow kept a copy.
	_ = report.SetReadDeadline(time.Now().Add(time.Second))
	b, _ := io.ReadAll(io.LimitReader(report, 1<<20))
	if len(b) > 0 && json.Unmarshal(firstLine(b), &st) == nil && st.Exited {
		cpu := time.Duration(st.UserUs+st.SysUs) * time.Microsecond
		return syscall.WaitStatus(st.WaitStatus), cpu, st
	}
	ws, _ := sup.Sys().(syscall.WaitStatus)
	return ws, sup.UserTime() + sup.SystemTime(), st
}

func firstLine(b []byte) []byte {
	for i, c := range b {
		if c == '\n' {
			return b[:i]
		}
	}
	return b
}
