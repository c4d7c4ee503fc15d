package runner

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

func TestParseProgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want int64
		bad  int
		err  error
	}{
		{"a fraction", "0.42\n", 420_000, 0, nil},
		{"the last valid line wins", "0.1\n0.2\n3/4\n", 750_000, 0, nil},
		{"one line without a newline", "0.5", 500_000, 0, nil},
		{"a half-written last line is left out", "0.2\n0.3", 200_000, 0, nil},
		{"garbage is counted and skipped", "0.1\nhello\n2/0\n-1/4\n5/4\n1.5\nNaN\n0.3\n", 300_000, 6, nil},
		{"garbage after the last valid line", "0.6\n???\n", 600_000, 1, nil},
		{"blanks around", "  1/2 \r\n\n", 500_000, 0, nil},
		{"complete", "1\n", 1_000_000, 0, nil},
		{"nothing valid", "abc\n", 0, 1, errNoReport},
		{"empty", "", 0, 0, errNoReport},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bad, err := parseProgress([]byte(tc.data))
			if got != tc.want || bad != tc.bad || !errors.Is(err, tc.err) {
				t.Fatalf("parseProgress(%q) = %d, %d bad, %v; want %d, %d bad, %v", tc.data, got, bad, err, tc.want, tc.bad, tc.err)
			}
		})
	}
}

// TestReadProgress: only a regular file is read, never through a link,
// and only its last 4 KiB.
func TestReadProgress(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "progress")
	if _, _, err := readProgress(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no file: %v", err)
	}
	// A long file: the valid report is at the end, after 1 MiB of lines
	// the reader never reaches.
	big := strings.Repeat("0.1\n", 1<<18) + strings.Repeat("x", 5000) + "\n0.9\n"
	if err := os.WriteFile(p, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, bad, err := readProgress(p); v != 900_000 || err != nil || bad != 0 {
		t.Fatalf("big file: %d, %d bad, %v", v, bad, err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("0.7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readProgress(link); err == nil {
		t.Fatal("a link was followed")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readProgress(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a FIFO: %v", err)
	}
}

// TestPredict: hand-worked. 10 % at t0, 30 % at t0+100 s: 0.2 per 100 s,
// the rest (70 %) takes 350 s, the end is t0+450 s.
func TestPredict(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	var p progressTrack
	p.add(t0, 100_000)
	if _, ok := p.predict(time.Second); ok {
		t.Fatal("predicted from one report")
	}
	p.add(t0.Add(50*time.Second), 200_000)
	if _, ok := p.predict(60 * time.Second); ok {
		t.Fatal("predicted from reports spanning less than the window")
	}
	p.add(t0.Add(100*time.Second), 300_000)
	end, ok := p.predict(60 * time.Second)
	if !ok || !end.Equal(t0.Add(450*time.Second)) {
		t.Fatalf("end %v %v, want %v", end, ok, t0.Add(450*time.Second))
	}
	// No progress: no prediction. Progress going back: a new track.
	var still progressTrack
	still.add(t0, 100_000)
	still.add(t0.Add(time.Hour), 100_000)
	if _, ok := still.predict(time.Second); ok {
		t.Fatal("predicted without progress")
	}
	p.add(t0.Add(200*time.Second), 50_000)
	if p.firstPPM != 50_000 || !p.firstAt.Equal(t0.Add(200*time.Second)) {
		t.Fatalf("track not restarted: %+v", p)
	}
	// The margin: with 1000 s left and a deadline 1050 s away, the run
	// meets it without the margin but misses it with 10 %.
	now := int64(1_000_000)
	if !ledger.MissesDeadline(now, now+1_000_000, now+1_050_000) || ledger.MissesDeadline(now, now+1_000_000, now+1_100_000) {
		t.Fatal("MissesDeadline does not apply the 10 % margin")
	}
}

// TestYoungDaly: sqrt(2 · C · MTBF), hand-computed, and its bounds.
func TestYoungDaly(t *testing.T) {
	lo, hi := 10*time.Second, 24*time.Hour
	for _, tc := range []struct {
		cost, mtbf, want time.Duration
	}{
		{2 * time.Second, time.Hour, 120 * time.Second},                     // sqrt(2·2·3600) = sqrt(14400)
		{500 * time.Millisecond, 100 * time.Second, 10 * time.Second},       // sqrt(2·0.5·100) = sqrt(100)
		{8 * time.Second, 30 * time.Minute, 169705627484 * time.Nanosecond}, // sqrt(2·8·1800) = sqrt(28800) = 169.7056…
		{time.Second, 18 * time.Second, lo},                                 // sqrt(36) = 6 s, below the floor
		{time.Minute, 10_000 * time.Hour, 65726706900619 * time.Nanosecond}, // sqrt(2·60·3.6e7) = sqrt(4.32e9) = 65726.7069… s
		{time.Minute, 100_000 * time.Hour, hi},                              // sqrt(4.32e10) ≈ 207846 s, above the 24 h cap
	} {
		got := youngDaly(tc.cost, tc.mtbf, lo, hi)
		if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("youngDaly(%v, %v) = %v, want %v", tc.cost, tc.mtbf, got, tc.want)
		}
	}
}

// TestProgressHelpers runs examples/jobs/progress.sh and progress.py as a
// task would and reads what they write with the peer's reader.
func TestProgressHelpers(t *testing.T) {
	examples, err := filepath.Abs("../examples/jobs")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, prog string
		args       []string
		want       int64
	}{
		{"shell, done/total", "/bin/sh", []string{"-c", `. "$EX/progress.sh"; coopgrid_progress 1 4; coopgrid_progress 3 4`}, 750_000},
		{"shell, fraction", "/bin/sh", []string{"-c", `. "$EX/progress.sh"; coopgrid_progress 0.25`}, 250_000},
		{"python, done/total", "python3", []string{"-c", `import sys; sys.path.insert(0, __import__("os").environ["EX"]); import progress; progress.report(2, 8); progress.report(6, 8)`}, 750_000},
		{"python, fraction", "python3", []string{filepath.Join(examples, "progress.py"), "0.5"}, 500_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.prog); err != nil {
				t.Skipf("no %s", tc.prog)
			}
			file := filepath.Join(t.TempDir(), ".coopgrid-progress")
			cmd := exec.Command(tc.prog, tc.args...)
			cmd.Env = append(os.Environ(), "COOPGRID_PROGRESS="+file, "EX="+examples)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			v, bad, err := readProgress(file)
			if err != nil || bad != 0 || v != tc.want {
				t.Fatalf("read %d (%d bad), %v; want %d", v, bad, err, tc.want)
			}
		})
	}
	// Outside coopgrid the helpers do nothing and do not fail.
	cmd := exec.Command("/bin/sh", "-c", `unset COOPGRID_PROGRESS; . "$EX/progress.sh"; coopgrid_progress 1 2`)
	cmd.Env = append(os.Environ(), "EX="+examples)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("without COOPGRID_PROGRESS: %v: %s", err, out)
	}
}
