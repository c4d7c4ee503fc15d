package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// fdControl is the supervisor's socket to its peer.
const fdControl = 3

// superviseMain runs in the supervisor process: it serves the peer's runs
// until the peer closes the socket (it exited or died), then ends every
// run still going and exits.
func superviseMain() int {
	// One processor: the supervisor's work is short bursts (a fork, a few
	// system calls, a message) handed between goroutines and the forker's
	// locked thread. With a second processor idle, every goroutine made
	// ready wakes another OS thread to run it, and each such wake-up is a
	// context switch, costly on a virtual machine; on one processor they
	// run in turn on the same thread (issue 22: 10-15 % of the
	// supervisor's CPU per run, BenchmarkStartToReap). Its load is far
	// below a core (a few ms of CPU per run).
	runtime.GOMAXPROCS(1)
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
	// A child subreaper: what a task orphans is re-parented to the
	// supervisor, which reaps it (reapPass) and, without a cgroup, knows
	// from its children whether anything of a run is left (endGroup).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "%s: child subreaper: %v (orphans of tasks without a cgroup go to init)\n", SupervisorArg0, err)
	}
	newServer(w).serve()
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
	// task for an orphan.
	startMu sync.RWMutex
	tmu     sync.Mutex
	tasks   map[int]*taskWatch

	// devNull is every task's stdin (devNullFd its descriptor).
	devNull   *os.File
	devNullFd uintptr
	// shared forks the runs without a sandbox (spawn.go); started on
	// first use.
	fmu    sync.Mutex
	shared *forker
	// scripts: which executables are #! scripts (confine).
	scripts scriptCache
	// procs writes tasks into their cgroups (confine).
	procs procsWriter
	// markers keeps the end markers' files open between runs.
	markers markerFiles
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
	s := &server{w: w, base: time.Now(), peerGone: make(chan struct{}), runs: map[uint64]*srvRun{}, tasks: map[int]*taskWatch{}}
	if f, err := os.Open(os.DevNull); err == nil {
		s.devNull, s.devNullFd = f, f.Fd()
	} else {
		fmt.Fprintf(os.Stderr, "%s: %v: every run will be refused\n", SupervisorArg0, err)
	}
	return s
}

// forkerFor is the forker of a run with Landlock ruleset ll (nil: none):
// the shared one, or, with a ruleset, one of its own (own).
func (s *server) forkerFor(ll *Landlock) (f *forker, own bool, err error) {
	if s.devNull == nil {
		return nil, false, fmt.Errorf("%s: no %s for the task's stdin", SupervisorArg0, os.DevNull)
	}
	if ll != nil {
		f, err = newForker(ll)
		return f, true, err
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.shared == nil {
		if s.shared, err = newForker(nil); err != nil {
			return nil, false, err
		}
	}
	return s.shared, false, nil
}

func (s *server) now() int64 { return int64(time.Since(s.base)) }

// serve reads the peer's requests until EOF, then waits for every run
// to have ended.
func (s *server) serve() {
	stopReaping := s.reapChildren()
	defer stopReaping()
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
	s.fmu.Lock()
	if s.shared != nil {
		s.shared.stop()
	}
	s.fmu.Unlock()
	if s.devNull != nil {
		s.devNull.Close()
	}
}

// open starts a run's goroutine; a request it cannot serve is refused
// with an end report (nothing of the task ran).
func (s *server) open(m *message) {
	files, err := s.w.takeFds(2)
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
		unix.Close(files[0])
		unix.Close(files[1])
		refuse(fmt.Sprintf("%s: a request without a run number or a config", SupervisorArg0))
		return
	case dup:
		unix.Close(files[0])
		unix.Close(files[1])
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

// runOne is one run, start to end. It blocks in no system call: the
// task's forker forks and releases it, the reaper waits for it
// (spawn.go).
func (s *server) runOne(m *message, stdout, stderr int, r *srvRun) Status {
	cfg := m.Config
	// The marker comes first, so that every way out records when the run
	// was over; its lock lives as long as the run.
	marker := s.markers.open(m.Marker)
	defer marker.close()
	defer func() { marker.mark(time.Now().UnixMicro(), false) }()
	opened := s.now()
	t, reason, detail := s.startTask(cfg, stdout, stderr, r)
	unix.Close(stdout)
	unix.Close(stderr)
	if reason != "" {
		return Status{Exited: true, InitReason: reason, InitErr: detail}
	}
	defer t.done()
	pid := t.pid
	r.mu.Lock()
	r.pgid = pid
	r.mu.Unlock()
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
		t.kill(r)
		endGroup(cfg.Cgroups, pid)
		if notRun.LeaseLapsed != "" {
			notRun.KilledAtUs = time.Now().UnixMicro()
			marker.mark(notRun.KilledAtUs, true)
		}
		return notRun
	}
	if err := t.f.release(pid); err != nil {
		t.kill(r)
		return Status{Exited: true, InitReason: ReasonStartFailed, InitErr: fmt.Sprintf("release %s: %v", cfg.Argv[0], err)}
	}
	return s.await(t, r, cfg, marker, lapsed.c)
}

// await waits for a released task and ends what it leaves.
func (s *server) await(t *heldTask, r *srvRun, cfg *Config, marker *endMarker, lapsed <-chan string) Status {
	var st Status
	pid := t.pid
	select {
	case x := <-t.w.exited:
		// Reaped (no signal goes to its group any more). The peer may be
		// paused, cut off or dead and see this end only later, or never:
		// end what the task left in its cgroup (or, without one, its
		// process group) now, as the peer would when it looks, and stamp
		// when the run was gone, so that the peer's journal records when
		// the run ended, not when it noticed.
		t.exit = &x
		st.CgroupsVacant = endGroup(cfg.Cgroups, pid)
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
		t.waitExit()
		endGroup(cfg.Cgroups, pid)
		st.KilledAtUs = time.Now().UnixMicro()
		marker.mark(st.KilledAtUs, true)
	}
	x := t.waitExit()
	st.Exited = true
	st.WaitStatus = uint32(x.ws)
	st.UserUs = rusageUs(x.ru.Utime)
	st.SysUs = rusageUs(x.ru.Stime)
	return st
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
func endGroup(cgroups []string, pgid int) (cgroupsVacant bool) {
	if len(cgroups) > 0 {
		return killCgroupProcs(cgroups, 5*time.Second)
	}
	if errors.Is(unix.Kill(-pgid, 0), unix.ESRCH) {
		return false
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
	return false
}

// reapInterval paces the reaper's passes when no SIGCHLD comes: a safety
// net only (every child's exit or stop sends one).
const reapInterval = time.Second

// reapChildren runs the supervisor's one reaper until stop: a pass
// (reapPass) on every SIGCHLD. It reaps the tasks, reports their stops
// and exits to their runs, and reaps, as they die, the processes the
// supervisor adopted from its tasks' trees (it is a child subreaper), so
// that a long run whose processes daemonize does not fill the process
// table with zombies.
func (s *server) reapChildren() (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(reapInterval)
		defer tick.Stop()
		for {
			select {
			case <-sig:
			case <-tick.C:
			case <-done:
				return
			}
			s.reapPass()
		}
	}()
	return func() { signal.Stop(sig); close(done); <-ended }
}
