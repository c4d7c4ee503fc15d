package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fdControl is the supervisor's socket to its peer.
const fdControl = 3

// superviseMain runs in the supervisor process: it serves the peer's runs
// until the peer closes the socket (it exited or died), then ends every
// run still going and exits.
func superviseMain() int {
	unix.CloseOnExec(fdControl)
	// Signals sent to the peer's process group do not reach the supervisor
	// (its own group), but one sent to it must not end the runs
	// unsupervised: it goes when its peer goes. Notify (not Ignore), so
	// that the tasks do not inherit an ignored disposition.
	signal.Notify(make(chan os.Signal, 1), unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGPIPE)
	w, err := newWire(os.NewFile(fdControl, "control"))
	if err != nil {
		return helperFail(SupervisorArg0, err)
	}
	s := newServer(w)
	stopReaping := s.reapOrphans()
	defer stopReaping()
	s.serve()
	return 0
}

// server is the supervisor's state: its runs and the peer's lease.
type server struct {
	w *wire
	// base and lastRenew (ns since base, monotonic): when the peer last
	// renewed the lease of every run.
	base      time.Time
	lastRenew atomic.Int64
	// peerGone is closed when the socket reads EOF: the peer died.
	peerGone chan struct{}

	mu   sync.Mutex
	runs map[uint64]*srvRun
	wg   sync.WaitGroup

	// startMu orders the reaper (write lock) against the start of a task
	// and its registration in tasks (read lock): the reaper never takes a
	// task's own exit, nor its stop after execve.
	startMu sync.RWMutex
	tmu     sync.Mutex
	tasks   map[int]bool
}

// srvRun is one run the supervisor serves.
type srvRun struct {
	ctl chan *message // go or abort
	// mu orders the peer's signals against the reaping of the task: once
	// reaped is set no signal is sent, so that a recycled process group
	// ID is never signalled. pgid is 0 until the task is held.
	mu     sync.Mutex
	pgid   int
	reaped bool
}

// signal sends sig to the run's process group while its task is not
// reaped.
func (r *srvRun) signal(sig unix.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pgid > 0 && !r.reaped {
		_ = unix.Kill(-r.pgid, sig)
	}
}

func newServer(w *wire) *server {
	return &server{w: w, base: time.Now(), peerGone: make(chan struct{}), runs: map[uint64]*srvRun{}, tasks: map[int]bool{}}
}

func (s *server) now() int64 { return int64(time.Since(s.base)) }

// serve reads the peer's requests until EOF, then waits for every run
// to have ended.
func (s *server) serve() {
	s.lastRenew.Store(s.now())
	for {
		m, err := s.w.recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "%s: %v; ending every run\n", SupervisorArg0, err)
			}
			break
		}
		switch m.Op {
		case opRenew:
			s.lastRenew.Store(s.now())
		case opOpen:
			s.open(m)
		case opGo, opAbort:
			s.mu.Lock()
			r := s.runs[m.Run]
			s.mu.Unlock()
			if r != nil {
				select {
				case r.ctl <- m:
				default: // a second word at the gate: the first counts
				}
			}
		case opSignal:
			s.mu.Lock()
			r := s.runs[m.Run]
			s.mu.Unlock()
			if r != nil && (m.Sig == int(unix.SIGTERM) || m.Sig == int(unix.SIGKILL)) {
				r.signal(unix.Signal(m.Sig))
			}
		default:
			fmt.Fprintf(os.Stderr, "%s: unknown request %q ignored\n", SupervisorArg0, m.Op)
		}
	}
	close(s.peerGone)
	s.wg.Wait()
	_ = s.w.close()
}

// open starts a run's goroutine; a request it cannot serve is refused
// with an end report (nothing of the task ran).
func (s *server) open(m *message) {
	files, err := s.w.takeFiles(2)
	refuse := func(detail string) {
		_ = s.w.send(&message{Op: opEnd, Run: m.Run, Status: &Status{Exited: true, InitReason: ReasonStartFailed, InitErr: detail}})
	}
	if err != nil {
		refuse(fmt.Sprintf("%s: %v", SupervisorArg0, err))
		return
	}
	s.mu.Lock()
	_, dup := s.runs[m.Run]
	if !dup && m.Config != nil && m.Run != 0 {
		s.runs[m.Run] = &srvRun{ctl: make(chan *message, 1)}
	}
	r := s.runs[m.Run]
	s.mu.Unlock()
	switch {
	case m.Config == nil || m.Run == 0:
		files[0].Close()
		files[1].Close()
		refuse(fmt.Sprintf("%s: a request without a run number or a config", SupervisorArg0))
		return
	case dup:
		files[0].Close()
		files[1].Close()
		refuse(fmt.Sprintf("%s: run %d is already open", SupervisorArg0, m.Run))
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		st := s.runOne(m, files[0], files[1], r)
		s.mu.Lock()
		delete(s.runs, m.Run)
		s.mu.Unlock()
		_ = s.w.send(&message{Op: opEnd, Run: m.Run, Status: &st})
	}()
}

// runOne is one run, start to end, on an OS thread of its own: the task's
// death signal, and the no_new_privs and Landlock domain it inherits, are
// that thread's, and only that thread, its tracer, may release it. The
// thread is never unlocked: it ends with the run, and nothing else ever
// runs on it.
func (s *server) runOne(m *message, stdout, stderr *os.File, r *srvRun) Status {
	runtime.LockOSThread()
	cfg := m.Config
	// The marker comes first, so that every way out records when the run
	// was over; its lock lives as long as the run.
	marker := openEndMarker(m.Marker)
	defer marker.close()
	defer func() { marker.mark(time.Now().UnixMicro(), false) }()
	opened := s.now()
	s.startMu.RLock()
	cmd, reason, detail := startTask(cfg, stdout, stderr)
	if cmd != nil {
		s.tmu.Lock()
		s.tasks[cmd.Process.Pid] = true
		s.tmu.Unlock()
	}
	s.startMu.RUnlock()
	stdout.Close()
	stderr.Close()
	if reason != "" {
		return Status{Exited: true, InitReason: reason, InitErr: detail}
	}
	pid := cmd.Process.Pid
	r.mu.Lock()
	r.pgid = pid
	r.mu.Unlock()
	defer func() {
		s.tmu.Lock()
		delete(s.tasks, pid)
		s.tmu.Unlock()
	}()
	lapsed := s.watchLease(time.Duration(cfg.LeaseMs)*time.Millisecond, opened)
	defer lapsed.stop()
	if err := s.w.send(&message{Op: opHeld, Run: m.Run, Pid: pid}); err != nil {
		// The peer is gone: its EOF follows.
		_ = err
	}
	// The gate: the task is held stopped before its first instruction.
	var startBy int64
	var notRun Status
	select {
	case c := <-r.ctl:
		if c.Op == opGo {
			startBy = c.StartByUs
			break
		}
		notRun = Status{Exited: true, InitReason: InitNotRun, InitErr: "the peer did not open the gate"}
	case why := <-lapsed.c:
		notRun = Status{Exited: true, InitReason: InitNotRun, InitErr: "held at the gate", LeaseLapsed: why}
	case <-s.peerGone:
		notRun = Status{Exited: true, InitReason: InitNotRun, InitErr: "held at the gate", LeaseLapsed: "the peer closed the lease (it exited or died)"}
	}
	if now := time.Now().UnixMicro(); notRun.InitReason == "" && startBy > 0 && now > startBy {
		notRun = Status{Exited: true, InitReason: InitStartLate,
			InitErr: fmt.Sprintf("the gate opened %v after the start's deadline: the peer was held up (paused?) after confirming the start, and its view of the ledger may be stale",
				time.Duration(now-startBy)*time.Microsecond)}
	}
	if notRun.InitReason != "" {
		r.mu.Lock()
		r.reaped = true
		killHeld(cmd)
		r.mu.Unlock()
		endGroup(cfg.Cgroups, pid)
		if notRun.LeaseLapsed != "" {
			notRun.KilledAtUs = time.Now().UnixMicro()
			marker.mark(notRun.KilledAtUs, true)
		}
		return notRun
	}
	// ESRCH: the peer's stop killed it while held; await reaps it.
	if err := unix.PtraceDetach(pid); err != nil && !errors.Is(err, unix.ESRCH) {
		r.mu.Lock()
		r.reaped = true
		killHeld(cmd)
		r.mu.Unlock()
		return Status{Exited: true, InitReason: ReasonStartFailed, InitErr: fmt.Sprintf("release %s: %v", cfg.Argv[0], err)}
	}
	return s.await(cmd, r, cfg, marker, lapsed.c)
}

// await waits for a released task and ends what it leaves.
func (s *server) await(cmd *exec.Cmd, r *srvRun, cfg *Config, marker *endMarker, lapsed <-chan string) Status {
	var st Status
	pid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() {
		// Seen exited but not reaped yet: the peer's signals stop before
		// the pid can be recycled.
		var si unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		r.mu.Lock()
		r.reaped = true
		err := cmd.Wait()
		r.mu.Unlock()
		waited <- err
	}()
	select {
	case <-waited:
		// The peer may be paused, cut off or dead and see this end only
		// later, or never: end what the task left in its cgroup (or, without
		// one, its process group) now, as the peer would when it looks, and
		// stamp when the run was gone, so that the peer's journal records
		// when the run ended, not when it noticed.
		endGroup(cfg.Cgroups, pid)
		gone := time.Now().UnixMicro()
		if len(cfg.Cgroups) > 0 {
			st.GoneAtUs = gone
		}
		marker.mark(gone, false)
	case why := <-lapsed:
		st.LeaseLapsed = why
	case <-s.peerGone:
		st.LeaseLapsed = "the peer closed the lease (it exited or died)"
	}
	if st.LeaseLapsed != "" {
		// The peer is stopped, cut off or dead: it cannot stop the run
		// itself. Kill it whole, stamp when it is gone, record that, report.
		r.signal(unix.SIGKILL) // not once reaped: the group ID may be recycled
		<-waited
		endGroup(cfg.Cgroups, pid)
		st.KilledAtUs = time.Now().UnixMicro()
		marker.mark(st.KilledAtUs, true)
	}
	ps := cmd.ProcessState
	st.Exited = true
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		st.WaitStatus = uint32(ws)
	}
	st.UserUs = ps.UserTime().Microseconds()
	st.SysUs = ps.SystemTime().Microseconds()
	return st
}

// killHeld kills a task held at its first instruction and reaps it.
func killHeld(cmd *exec.Cmd) {
	_ = unix.Kill(cmd.Process.Pid, unix.SIGKILL)
	_ = unix.PtraceDetach(cmd.Process.Pid)
	_ = cmd.Wait()
}

// leaseWatch is one run's view of the peer-wide lease.
type leaseWatch struct {
	c    chan string
	stop func()
}

// watchLease reports on c when no renewal came for lease (nothing without
// a lease): a run is due when the later of the last renewal and its own
// opening is a lease ago.
func (s *server) watchLease(lease time.Duration, opened int64) leaseWatch {
	out := leaseWatch{c: make(chan string, 1), stop: func() {}}
	if lease <= 0 {
		return out
	}
	due := func() time.Duration {
		return time.Duration(max(s.lastRenew.Load(), opened)+int64(lease)-s.now()) + time.Millisecond
	}
	var t *time.Timer
	var mu sync.Mutex
	stopped := false
	mu.Lock() // t is set before the first firing reads it
	defer mu.Unlock()
	t = time.AfterFunc(due(), func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if d := due(); d > time.Millisecond {
			t.Reset(d)
			return
		}
		out.c <- fmt.Sprintf("the peer did not renew the run's lease for %v", lease)
	})
	out.stop = func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		t.Stop()
	}
	return out
}

// endGroup kills what is left of a run whose task is reaped or killed:
// every process of its cgroup, or, without one, of its process group (the
// task's pid). Without a cgroup, a group with no process left (the usual
// case: the task forked nothing that outlived it) costs one kill(2);
// otherwise its processes are killed until no live child of the
// supervisor (it is a child subreaper: the task's orphans are its
// children) is left in it. A setsid child is out of reach of both, as of
// the peer's own kill; a process of another run of the same peer that
// moved itself into this group dies with the group's SIGKILL but is not
// waited for (the peer's own kill of the group, before it journals the
// end, finds it).
func endGroup(cgroups []string, pgid int) {
	if len(cgroups) > 0 {
		killCgroupProcs(cgroups, 5*time.Second)
		return
	}
	if errors.Is(unix.Kill(-pgid, 0), unix.ESRCH) {
		return
	}
	KillUntilEmpty(5*time.Second, func() int {
		if errors.Is(unix.Kill(-pgid, unix.SIGKILL), unix.ESRCH) {
			return 0
		}
		n := 0
		for _, pid := range children() {
			if st, err := ReadProcStat(pid); err == nil && st.Pgrp == pgid && st.State != 'Z' && st.State != 'X' {
				n++
			}
		}
		return n
	})
}

// reapInterval paces the reaper's passes.
const reapInterval = 100 * time.Millisecond

// reapOrphans reaps, as they die, the processes the supervisor adopted
// from its tasks' trees (it is a child subreaper), so that a long run
// whose processes daemonize does not fill the process table with zombies.
// Tasks themselves are left to their own Wait.
func (s *server) reapOrphans() (stop func()) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "%s: child subreaper: %v (orphans of tasks without a cgroup go to init)\n", SupervisorArg0, err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sig:
			case <-done:
				return
			}
			s.startMu.Lock()
			for _, pid := range children() {
				s.tmu.Lock()
				task := s.tasks[pid]
				s.tmu.Unlock()
				if task {
					continue
				}
				if st, err := ReadProcStat(pid); err == nil && st.State == 'Z' {
					var ws unix.WaitStatus
					_, _ = unix.Wait4(pid, &ws, unix.WNOHANG|unix.WALL, nil)
				}
			}
			s.startMu.Unlock()
			// Every task's exit is a SIGCHLD too: one pass per interval
			// for all of them, not a pass per task (an orphan stays a
			// zombie that long at most).
			select {
			case <-time.After(reapInterval):
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(sig); close(done) }
}
