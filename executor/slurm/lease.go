package slurm

import (
	"fmt"
	"time"

	"github.com/coopgrid/coopgrid/executor"
)

// The run lease on Slurm (docs/SLURM.md, "The run lease"). The process
// executor's lease is held by each run's supervisor, on the peer's host,
// which kills the run when the peer stops renewing it: cut off, paused or
// dead. A Slurm job has no supervisor of the peer's beside it, and it is
// meant to outlive a peer that dies (the next daemon adopts it: adopt.go),
// so here the lease covers the one case the peer itself can see: cut off
// from its federation while running. The executor watches the contact
// every quarter lease and, once it is older than a lease, kills its jobs
// (SIGKILL to the job's processes, then scancel): Result.LeaseLapsed, as
// the supervisor's kill. A paused or dead peer kills nothing; its jobs run
// on until it comes back (and stops or adopts them) or their time limit.

// SetLease makes the executor end its runs when the peer has not
// confirmed contact with its federation (contact) for lease. The runner
// calls it once, before it starts tasks; later calls change nothing.
func (e *Executor) SetLease(lease time.Duration, contact func() time.Time) {
	if lease <= 0 || contact == nil {
		return
	}
	e.leaseOnce.Do(func() {
		e.leaseDone = make(chan struct{})
		go e.watchLease(lease, contact)
	})
}

// watchLease checks the contact every quarter lease until the executor
// stops.
func (e *Executor) watchLease(lease time.Duration, contact func() time.Time) {
	defer close(e.leaseDone)
	t := time.NewTicker(lease / 4)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		if since := time.Since(contact()); since > lease {
			e.lapse(fmt.Sprintf("lease lapsed: no contact with the federation for %v (lease %v): the leader may place the task elsewhere",
				since.Round(time.Millisecond), lease))
		}
	}
}

// lapse kills every run's job: the runs' lease has lapsed.
func (e *Executor) lapse(why string) {
	if e.detached.Load() {
		// Closing as a dead peer: its jobs run on, to be adopted.
		return
	}
	e.mu.Lock()
	runs := make([]*run, 0, len(e.runs))
	for _, r := range e.runs {
		runs = append(runs, r)
	}
	e.mu.Unlock()
	for _, r := range runs {
		if r.lapseLease(why) {
			e.log.Warn("run lease lapsed: killing the job", "task", r.id, "job", r.jobID(), "why", why)
		}
	}
}

// lapseLease marks the run's lease lapsed and asks follow to kill its job
// at once (a stop in progress, with its grace, is cut short). It reports
// whether the run was not marked yet.
func (r *run) lapseLease(why string) bool {
	r.mu.Lock()
	first := !r.leaseLapsed
	r.leaseLapsed = true
	if r.stopReason == "" {
		r.stopReason, r.stopDetail, r.stopGrace = executor.ReasonStopped, why, 0
		close(r.stopped)
	}
	r.mu.Unlock()
	r.poke()
	return first
}
