package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrSupervisorDied: the supervisor exited (crashed, killed) while the
// run was open; its task died with it (its death signal).
var ErrSupervisorDied = errors.New("the run supervisor died")

// Client is the peer's side of its supervisor: one process, started once,
// serving every run until Close.
type Client struct {
	cmd  *exec.Cmd
	w    *wire
	dead chan struct{} // closed once the supervisor is gone and reaped
	// exit says how the supervisor ended; set before dead is closed.
	exit string

	mu   sync.Mutex
	runs map[uint64]*Run
	next uint64
}

// Run is one run open in the supervisor.
type Run struct {
	c    *Client
	id   uint64
	held chan int    // the task's pid, once held
	end  chan Status // the end report
}

// StartClient starts the supervisor: the binary at path re-executed with
// argv[0] SupervisorArg0, in a process group of its own (signals meant for
// the peer's group must not end it), with stderr (its own messages) as
// given.
func StartClient(path string, stderr io.Writer) (*Client, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("supervisor socket: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "supervisor"), os.NewFile(uintptr(fds[1]), "peer")
	cmd := &exec.Cmd{
		Path:        path,
		Args:        []string{SupervisorArg0},
		Env:         []string{Env + "=supervisor"},
		Dir:         "/",
		Stderr:      stderr,
		ExtraFiles:  []*os.File{theirs},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		mine.Close()
		return nil, fmt.Errorf("start the run supervisor %s: %w", path, err)
	}
	w, err := newWire(mine)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("run supervisor socket: %w", err)
	}
	c := &Client{cmd: cmd, w: w, dead: make(chan struct{}), runs: map[uint64]*Run{}}
	go c.read()
	return c, nil
}

// Pid is the supervisor's process ID.
func (c *Client) Pid() int { return c.cmd.Process.Pid }

// Dead is closed once the supervisor has exited.
func (c *Client) Dead() <-chan struct{} { return c.dead }

// read dispatches the supervisor's reports until it goes.
func (c *Client) read() {
	for {
		m, err := c.w.recv()
		if err != nil {
			break
		}
		c.mu.Lock()
		r := c.runs[m.Run]
		if m.Op == opEnd {
			delete(c.runs, m.Run)
		}
		c.mu.Unlock()
		if r == nil {
			continue
		}
		switch {
		case m.Op == opHeld:
			r.held <- m.Pid
		case m.Op == opEnd && m.Status != nil:
			r.end <- *m.Status
		case m.Op == opEnd:
			r.end <- Status{Exited: true, InitReason: ReasonStartFailed, InitErr: "the supervisor ended the run without a report"}
		}
	}
	_ = c.w.close()
	err := c.cmd.Wait()
	c.exit = fmt.Sprintf("%v", err)
	if err == nil {
		c.exit = "exited"
	}
	c.mu.Lock()
	c.runs = nil // no run opens any more
	c.mu.Unlock()
	close(c.dead)
}

// Open asks the supervisor to start a run's task and hold it at its first
// instruction; stdout and stderr become the task's (the caller keeps, and
// closes, its own copies). marker is the run's end marker. Held then says
// whether the task is held or was refused.
func (c *Client) Open(marker string, cfg *Config, stdout, stderr *os.File) (*Run, error) {
	return c.OpenFds(marker, cfg, int(stdout.Fd()), int(stderr.Fd()))
}

// OpenFds is Open with the streams as descriptors.
func (c *Client) OpenFds(marker string, cfg *Config, stdout, stderr int) (*Run, error) {
	c.mu.Lock()
	if c.runs == nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w (%s)", ErrSupervisorDied, c.exit)
	}
	c.next++
	r := &Run{c: c, id: c.next, held: make(chan int, 1), end: make(chan Status, 1)}
	c.runs[r.id] = r
	c.mu.Unlock()
	if err := c.w.sendFds(&message{Op: opOpen, Run: r.id, Marker: marker, Config: cfg}, stdout, stderr); err != nil {
		c.mu.Lock()
		if c.runs != nil {
			delete(c.runs, r.id)
		}
		c.mu.Unlock()
		return nil, fmt.Errorf("open a run in the supervisor: %w", err)
	}
	return r, nil
}

// Renew renews the lease of every run.
func (c *Client) Renew() error { return c.w.send(&message{Op: opRenew}) }

// Close closes the socket, which ends every run still open, and waits for
// the supervisor to exit.
func (c *Client) Close() {
	_ = c.w.close()
	<-c.dead
}

// Held waits until the task is held before its first instruction (its
// pid), or the supervisor refused the run (st, with InitReason), or died
// (err).
func (r *Run) Held() (pid int, st *Status, err error) {
	select {
	case pid := <-r.held: // first: a lease lapse right after is an end after a hold
		return pid, nil, nil
	default:
	}
	select {
	case pid := <-r.held:
		return pid, nil, nil
	case s := <-r.end:
		return 0, &s, nil
	case <-r.c.dead:
		select {
		case pid := <-r.held:
			return pid, nil, nil
		case s := <-r.end:
			return 0, &s, nil
		default:
		}
		return 0, nil, r.c.died()
	}
}

// Release opens the gate: the task runs, unless startByUs (unix µs,
// positive) has passed when the supervisor reads it.
func (r *Run) Release(startByUs int64) error {
	return r.c.w.send(&message{Op: opGo, Run: r.id, StartByUs: startByUs})
}

// Signal sends sig (SIGTERM or SIGKILL) to the run's process group, as
// long as its task is not reaped: never to a recycled group ID.
func (r *Run) Signal(sig syscall.Signal) error {
	return r.c.w.send(&message{Op: opSignal, Run: r.id, Sig: int(sig)})
}

// Abort keeps the gate closed: the held task is killed before its first
// instruction. The run still ends with a report (Wait).
func (r *Run) Abort() error { return r.c.w.send(&message{Op: opAbort, Run: r.id}) }

// Wait returns the run's end report, or ErrSupervisorDied.
func (r *Run) Wait() (Status, error) {
	select {
	case s := <-r.end:
		return s, nil
	case <-r.c.dead:
		// A report read before the death still counts.
		select {
		case s := <-r.end:
			return s, nil
		default:
		}
		return Status{}, r.c.died()
	}
}

func (c *Client) died() error { return fmt.Errorf("%w (%s)", ErrSupervisorDied, c.exit) }
