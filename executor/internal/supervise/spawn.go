package supervise

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A task is forked, traced, by a forker: a goroutine locked for good to an
// OS thread (never unlocked, so the thread ends with the goroutine and is
// never handed to other code). That thread is the task's parent and
// tracer: its exit is the task's death signal, and only it may release
// the task (PTRACE_DETACH). Everything else about a task — waiting for
// its stop after the execve, for its exit, reaping it — is done by the
// supervisor's one reaper (reapChildren), which any thread of the process
// may be, and no goroutine blocks in a system call per run.
//
// Runs without a Landlock sandbox share one forker, which lives as long as
// the supervisor: the thread state a task inherits from it — no_new_privs
// — is the same for all of them, and the task's death signal then fires
// when the supervisor exits, as it must. A run with a sandbox gets a
// forker of its own, whose thread takes the run's Landlock ruleset (it
// names the run's own directories: no two runs share one, and a thread's
// domain can only be narrowed, never lifted) and ends once the task is
// reaped.
type forker struct {
	reqs chan func()
	quit chan struct{}
}

// newForker starts a forker whose thread has no_new_privs and, when ll is
// set, the Landlock ruleset ll.
func newForker(ll *Landlock) (*forker, error) {
	f := &forker{reqs: make(chan func()), quit: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: on return the thread exits, so a thread with a
		// sandbox, or one that failed half way, is never reused.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			ready <- fmt.Errorf("no_new_privs: %w", err)
			return
		}
		// Tasks get the kernel's default timer slack, not the one the
		// peer raised for itself (cmd/peer/timerslack.go): a task
		// inherits its forking thread's.
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, taskTimerSlack, 0, 0, 0); err != nil {
			ready <- fmt.Errorf("timer slack: %w", err)
			return
		}
		if ll != nil {
			// This thread only forks and releases the task, which the
			// ruleset allows.
			if err := ll.apply(); err != nil {
				ready <- fmt.Errorf("sandbox: %w", err)
				return
			}
		}
		ready <- nil
		for {
			select {
			case fn := <-f.reqs:
				fn()
			case <-f.quit:
				return
			}
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return f, nil
}

// taskTimerSlack is the timer slack, in ns, every task starts with: the
// kernel's default for a process started by init.
const taskTimerSlack = 50_000

// do runs fn on the forker's thread.
func (f *forker) do(fn func()) {
	done := make(chan struct{})
	f.reqs <- func() { fn(); close(done) }
	<-done
}

// stop ends the forker's thread; its tasks must be reaped by then.
func (f *forker) stop() { close(f.quit) }

// taskWatch is what the reaper tells a run of its task.
type taskWatch struct {
	r *srvRun
	// stopped: the task entered a ptrace stop (the first one is the stop
	// after its execve); later ones are not kept.
	stopped chan struct{}
	// exited: the task is reaped (r.reaped was set first).
	exited chan taskExit
}

type taskExit struct {
	ws unix.WaitStatus
	ru unix.Rusage
}

// spawn forks and execs exe on forker f, traced (stopped right after its
// execve), in a process group of its own, with stdout and stderr, and
// registers it with the reaper before the reaper can see it.
func (s *server) spawn(f *forker, cfg *Config, exe string, stdout, stderr int, r *srvRun) (int, *taskWatch, error) {
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Ptrace: true, Setpgid: true}
	if cfg.RunAs != nil {
		sys.Credential = &syscall.Credential{Uid: cfg.RunAs.UID, Gid: cfg.RunAs.GID, Groups: []uint32{}}
	}
	env := StripLoaderEnv(cfg.Env)
	if env == nil {
		env = []string{}
	}
	attr := &syscall.ProcAttr{Dir: cfg.Dir, Env: env, Files: []uintptr{s.devNullFd, uintptr(stdout), uintptr(stderr)}, Sys: sys}
	var (
		pid int
		w   *taskWatch
		err error
	)
	f.do(func() {
		s.startMu.RLock()
		defer s.startMu.RUnlock()
		pid, err = syscall.ForkExec(exe, cfg.Argv, attr)
		if err != nil {
			return
		}
		w = &taskWatch{r: r, stopped: make(chan struct{}, 1), exited: make(chan taskExit, 1)}
		s.tmu.Lock()
		s.tasks[pid] = w
		s.tmu.Unlock()
	})
	return pid, w, err
}

// release lets the held task pid go, on its tracer's thread. ESRCH: it was
// killed while held; its exit is reported as any other.
func (f *forker) release(pid int) error {
	var err error
	f.do(func() { err = unix.PtraceDetach(pid) })
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// reapPass reaps every child that can be: the tasks (their ptrace stops
// too) and the orphans the supervisor adopted as a child subreaper. A
// task's exit is peeked at first (WNOWAIT) and reaped under its run's
// lock with reaped set, so that the peer's signals stop before its
// process group ID can be recycled. startMu (held) keeps a task forked
// but not yet registered out of sight.
func (s *server) reapPass() {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	for {
		var si unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		pid := siginfoPid(&si)
		if err != nil || pid <= 0 {
			return // ECHILD, or none waitable
		}
		s.tmu.Lock()
		w := s.tasks[pid]
		s.tmu.Unlock()
		var ws unix.WaitStatus
		var got int
		switch {
		case w == nil: // an adopted orphan
			got, _ = unix.Wait4(pid, &ws, unix.WNOHANG|unix.WALL, nil)
		case si.Code == cldTrapped || si.Code == cldStopped:
			got, _ = unix.Wait4(pid, &ws, unix.WNOHANG|unix.WALL, nil)
			select {
			case w.stopped <- struct{}{}:
			default:
			}
		default:
			var ru unix.Rusage
			w.r.mu.Lock()
			w.r.reaped = true
			got, _ = unix.Wait4(pid, &ws, unix.WNOHANG|unix.WALL, &ru)
			w.r.mu.Unlock()
			if got == pid {
				s.tmu.Lock()
				delete(s.tasks, pid)
				s.tmu.Unlock()
				w.exited <- taskExit{ws: ws, ru: ru}
			}
		}
		if got != pid {
			// Not consumed (it should have been): stop rather than peek
			// at it again; the next SIGCHLD or tick retries.
			return
		}
	}
}

// waitid's si_code for SIGCHLD.
const (
	cldTrapped = 4
	cldStopped = 5
)

// siginfoPid is si_pid of a SIGCHLD siginfo, which x/sys does not name:
// the union after the three ints (and, on 64-bit, their padding).
func siginfoPid(si *unix.Siginfo) int {
	off := uintptr(12)
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(si), off)))
}

func rusageUs(tv unix.Timeval) int64 { return tv.Sec*1_000_000 + int64(tv.Usec) }
