package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The helper process of TestAwaitEndMarkers: a supervisor stand-in that
// creates and locks its marker, says so, and then never ends (stuck).
func TestMarkerHolderProcess(t *testing.T) {
	path := os.Getenv("COOPGRID_MARKER_HOLDER")
	if path == "" {
		t.Skip("helper process only")
	}
	m := openEndMarker(path)
	if m == nil {
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(10 * time.Minute)
}

// TestAwaitEndMarkers: the boot's wait on the markers of the runs a dead
// peer left open returns each marker's time once its supervisor is done
// with it, never before; kills a supervisor stuck past the wait; and
// reads no time from a missing or cut-short marker.
func TestAwaitEndMarkers(t *testing.T) {
	dir := t.TempDir()
	marker := func(name string) string { return filepath.Join(dir, name) }

	// A supervisor that marks its run's end a while after the boot
	// started waiting (here the same process: flock locks belong to the
	// open file, so the wait's own open of the file still conflicts).
	late := openEndMarker(marker("late"))
	if late == nil {
		t.Fatal("cannot create a marker")
	}
	const lateAt = 1_700_000_000_000_000
	marked := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		late.mark(lateAt, true)
		close(marked)
		late.f.Close() // the supervisor exits
	}()

	// A stuck supervisor, a process of its own group that holds its lock.
	stuck := exec.Command(os.Args[0], "-test.run=^TestMarkerHolderProcess$", "-test.count=1")
	stuck.Env = append(os.Environ(), "COOPGRID_MARKER_HOLDER="+marker("stuck"))
	stuck.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := stuck.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stuck.Process.Kill(); _ = stuck.Wait() }()
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("holder said %q, %v", buf, err)
	}

	if err := os.WriteFile(marker("torn"), []byte("1700000000"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(marker("done"), []byte(strconv.Itoa(lateAt+1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runs := []OpenRun{
		{Marker: marker("late")},
		{Marker: marker("stuck"), PGID: stuck.Process.Pid},
		{Marker: marker("missing")},
		{Marker: marker("torn")},
		{Marker: marker("done")},
		{},
	}
	got := AwaitEndMarkers(runs, 500*time.Millisecond)
	select {
	case <-marked:
	default:
		t.Fatal("the wait returned before the late supervisor marked its run")
	}
	want := []int64{lateAt, 0, 0, 0, lateAt + 1, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%q: %d, want %d", runs[i].Marker, got[i], want[i])
		}
	}
	err = stuck.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the stuck supervisor ended with %v, want killed", err)
	}
}
