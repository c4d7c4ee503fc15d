package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A `peer run` process sleeps with a timer slack of runTimerSlack (issue
// 17, the idle cost of many peers). An idle peer wakes for short bursts
// (a heartbeat to answer, a timer), and the Go runtime's sysmon thread is
// woken from its deep sleep by the first system call of each burst, then
// sleeps 20 µs at a time until the process is idle again: on this 2-vCPU
// VM two thirds of an idle voter's context switches were sysmon's, each
// one dear on a virtual machine (docs/BENCHMARKS.md, "Timer slack, session
// 12"). With a slack of a millisecond the kernel may end each of those
// 20 µs sleeps up to a millisecond late, so a burst costs sysmon one
// sleep instead of several; the peer's own timers (heartbeats every
// 133 ms, a 20 ms commit timeout) are late by at most that millisecond.
//
// The slack is a property of each thread, inherited by the threads a
// thread creates and kept across execve. sysmon starts before main, and
// setting another thread's slack needs CAP_SYS_NICE, so the process
// re-executes itself once with the slack raised on the calling thread:
// every thread of the new image inherits it. Tasks do not: the run
// supervisor's forker puts the kernel's default back before it forks one
// (executor/internal/supervise/spawn.go).
const (
	runTimerSlack = time.Millisecond
	// envTimerSlack overrides runTimerSlack ("0" leaves the slack as
	// started); a process whose slack is at least the wanted one is not
	// re-executed.
	envTimerSlack = "COOPGRID_TIMER_SLACK"
)

// reexecKey marks a context whose process may re-execute itself: the
// real main's, not a test's call of run.
type reexecKey struct{}

func withReexec(ctx context.Context) context.Context {
	return context.WithValue(ctx, reexecKey{}, true)
}

// wantedTimerSlack is the slack a `peer run` process wants: runTimerSlack,
// or envTimerSlack's duration (0: none wanted).
func wantedTimerSlack() (time.Duration, error) {
	v, ok := os.LookupEnv(envTimerSlack)
	if !ok || v == "" {
		return runTimerSlack, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > time.Second {
		return 0, usageErr("%s=%q: want a duration from 0 to 1s, such as 1ms or 50us", envTimerSlack, v)
	}
	return d, nil
}

// raiseTimerSlack re-executes this process with the wanted slack when the
// calling thread's is lower and ctx allows it. It returns only when it did
// not re-execute: nil when nothing was to be done, an error (a usage error
// for a bad variable) otherwise; a failed re-execution is logged, and the
// peer runs with the slack it has.
func raiseTimerSlack(ctx context.Context, log *slog.Logger) error {
	want, err := wantedTimerSlack()
	if err != nil || want == 0 || ctx.Value(reexecKey{}) == nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cur, err := currentTimerSlack()
	if err != nil || cur >= want || ctx.Err() != nil {
		// A stop already asked for (SIGINT or SIGTERM, which the new
		// image would not see) is not re-executed away.
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(want.Nanoseconds()), 0, 0, 0); err != nil {
		log.Warn("peer: timer slack not raised", "err", err)
		return nil
	}
	err = syscall.Exec(reexecPath(), os.Args, os.Environ())
	log.Warn("peer: re-execution with a raised timer slack failed; running with the slack as started", "err", err)
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(cur.Nanoseconds()), 0, 0, 0)
	return nil
}

// reexecPath is the file to re-execute: this process's executable by its
// path, so that the process keeps its name (ps, top and pgrep show the
// file's name; /proc/self/exe would show "exe"), or /proc/self/exe when
// the path cannot be read. An upgrade that replaced the file in between
// runs the new binary, as a start a moment later would have.
func reexecPath() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return "/proc/self/exe"
}

// currentTimerSlack is the calling thread's timer slack.
func currentTimerSlack() (time.Duration, error) {
	r, _, errno := unix.Syscall(unix.SYS_PRCTL, unix.PR_GET_TIMERSLACK, 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("prctl(PR_GET_TIMERSLACK): %w", errno)
	}
	return time.Duration(r), nil
}
