package supervise

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// servePair runs a supervisor's server in this process on one end of a
// socket pair and returns the peer's end.
func servePair(t *testing.T) *wire {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := newWire(os.NewFile(uintptr(fds[0]), "server"))
	if err != nil {
		t.Fatal(err)
	}
	pw, err := newWire(os.NewFile(uintptr(fds[1]), "peer"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { newServer(sw).serve(); close(done) }()
	t.Cleanup(func() {
		_ = pw.close()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the server did not end after its peer closed the socket")
		}
	})
	return pw
}

func devNulls(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	a, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func recvOp(t *testing.T, w *wire) *message {
	t.Helper()
	m, err := w.recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return m
}

// TestSupervisorRefusesBadRequests: a request the supervisor cannot serve
// is answered with an end that says why, and starts nothing; the runs it
// serves are not disturbed.
func TestSupervisorRefusesBadRequests(t *testing.T) {
	w := servePair(t)
	out, errf := devNulls(t)
	sleep := &Config{Argv: []string{"sleep", "60"}, Dir: "/", Allow: []string{"sleep"}, Path: "/usr/bin:/bin"}
	// A run held at its gate, then requests that must be refused.
	if err := w.send(&message{Op: opOpen, Run: 1, Config: sleep}, out, errf); err != nil {
		t.Fatal(err)
	}
	held := recvOp(t, w)
	if held.Op != opHeld || held.Run != 1 || held.Pid <= 0 {
		t.Fatalf("first run: %+v, want held", held)
	}
	for _, c := range []struct {
		name  string
		m     *message
		files bool
		want  string
		code  string
	}{
		{"same run number", &message{Op: opOpen, Run: 1, Config: sleep}, true, "already open", ReasonStartFailed},
		{"no config", &message{Op: opOpen, Run: 2}, true, "without a run number or a config", ReasonStartFailed},
		{"no run number", &message{Op: opOpen, Config: sleep}, true, "without a run number or a config", ReasonStartFailed},
		{"no descriptors", &message{Op: opOpen, Run: 3, Config: sleep}, false, "without its descriptors", ReasonStartFailed},
		{"not allowed", &message{Op: opOpen, Run: 4, Config: &Config{Argv: []string{"/bin/sh"}, Dir: "/", Allow: []string{"sleep"}, Path: "/usr/bin:/bin"}}, true, "allow list", ReasonNotAllowed},
	} {
		var err error
		if c.files {
			err = w.send(c.m, out, errf)
		} else {
			err = w.send(c.m)
		}
		if err != nil {
			t.Fatal(err)
		}
		m := recvOp(t, w)
		if m.Op != opEnd || m.Run != c.m.Run || m.Status == nil || m.Status.InitReason != c.code || !strings.Contains(m.Status.InitErr, c.want) {
			t.Errorf("%s: answered %+v (status %+v), want an end with %s saying %q", c.name, m, m.Status, c.code, c.want)
		}
	}
	if err := unix.Kill(held.Pid, 0); err != nil {
		t.Fatalf("the held task %d is gone after the refusals: %v", held.Pid, err)
	}
	// The held run is still served: turned away at its gate, it ends
	// without having run.
	if err := w.send(&message{Op: opAbort, Run: 1}); err != nil {
		t.Fatal(err)
	}
	end := recvOp(t, w)
	if end.Op != opEnd || end.Run != 1 || end.Status == nil || end.Status.InitReason != InitNotRun {
		t.Fatalf("aborted run: %+v", end)
	}
}

// TestSupervisorEndsRunsWhenItsPeerGoes: the peer's socket closing (it
// died) kills every run, held or running, and marks each end.
func TestSupervisorEndsRunsWhenItsPeerGoes(t *testing.T) {
	c, err := StartClient(os.Args[0], os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, errf := devNulls(t)
	dir := t.TempDir()
	sleep := &Config{Argv: []string{"sleep", "60"}, Dir: "/", Allow: []string{"sleep"}, Path: "/usr/bin:/bin"}
	var pids []int
	var markers []string
	for i, release := range []bool{true, false} {
		marker := dir + "/m" + string(rune('0'+i))
		r, err := c.Open(marker, sleep, out, errf)
		if err != nil {
			t.Fatal(err)
		}
		pid, refused, err := r.Held()
		if err != nil || refused != nil {
			t.Fatalf("run %d: %v %+v", i, err, refused)
		}
		if release {
			if err := r.Release(0); err != nil {
				t.Fatal(err)
			}
		}
		pids, markers = append(pids, pid), append(markers, marker)
	}
	before := time.Now().UnixMicro()
	_ = c.w.close() // as the peer's death does
	select {
	case <-c.Dead():
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor did not exit after its peer went")
	}
	for i, pid := range pids {
		if err := unix.Kill(pid, 0); err == nil {
			t.Errorf("run %d: task %d alive after its peer went", i, pid)
		}
		at, ok := ReadEndMarker(markers[i])
		if !ok || at < before {
			t.Errorf("run %d: end marker %d (%v), want a time after the peer went (%d)", i, at, ok, before)
		}
	}
}
