package supervise

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Reason codes, the executor's (executor.Reason*; a test checks they
// match).
const (
	ReasonNotAllowed  = "not_allowed"
	ReasonBadSpec     = "bad_spec"
	ReasonStartFailed = "start_failed"
	// InitStartLate: the gate opened after Config.StartByUs; the executor
	// reports it as a lapsed lease, not as the task's failure.
	InitStartLate = "start_late"
	// InitNotRun: the task was killed at the gate, before its first
	// instruction (the peer turned the run away, or lost its lease).
	InitNotRun = "not_run"
)

// LookPath finds an executable regular file named name in the PATH list,
// without consulting the daemon's own environment.
func LookPath(name, pathList string) (string, error) {
	p, _, err := lookPath(name, pathList)
	return p, err
}

// lookPath is LookPath, with what it found's stat.
func lookPath(name, pathList string) (string, os.FileInfo, error) {
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, fi, nil
		}
	}
	return "", nil, fmt.Errorf("%q not found in PATH %s", name, pathList)
}

// Resolve turns argv[0] into the path to execute and checks it against
// the owner's allow list (allow, allowAny, with bare names looked up in
// pathList). workDir is where relative paths point. On refusal reason is
// one of the executor's reason codes and detail says why.
func Resolve(argv0, workDir string, allow []string, allowAny bool, pathList string) (exe, reason, detail string) {
	exe, _, reason, detail = resolveStat(argv0, workDir, allow, allowAny, pathList)
	return exe, reason, detail
}

// resolveStat is Resolve, with the stat of the file it checked against
// the allow list (nil with allowAny, which checks none): the file the
// execve must run.
func resolveStat(argv0, workDir string, allow []string, allowAny bool, pathList string) (exe string, fi os.FileInfo, reason, detail string) {
	var path string
	switch {
	case filepath.IsAbs(argv0):
		path = filepath.Clean(argv0)
	case strings.Contains(argv0, "/"):
		if !allowAny {
			return "", nil, ReasonNotAllowed, fmt.Sprintf("relative executable %q: the machine owner's policy allows files shipped with the task only with allow_any", argv0)
		}
		if err := LocalPath(argv0); err != nil {
			return "", nil, ReasonBadSpec, fmt.Sprintf("executable %q: %v", argv0, err)
		}
		path = filepath.Join(workDir, argv0)
	default:
		found, ffi, err := lookPath(argv0, pathList)
		if err != nil {
			if allowAny {
				return "", nil, ReasonStartFailed, fmt.Sprintf("executable %v", err)
			}
			// An unknown name cannot be on the allow list either; say both.
			return "", nil, ReasonNotAllowed, fmt.Sprintf("executable %v, and the machine owner's policy does not allow it", err)
		}
		path, fi = found, ffi
	}
	if allowAny {
		return path, nil, "", ""
	}
	if fi == nil {
		var err error
		if fi, err = os.Stat(path); err != nil {
			return "", nil, ReasonNotAllowed, fmt.Sprintf("executable %q (%s) is not on the machine owner's allow list: %v", argv0, path, err)
		}
	}
	for _, a := range allow {
		// An entry written as argv[0] is, or names, the very path just
		// resolved (the same lookup in the same PATH): the same file.
		if a == argv0 || a == path {
			return path, fi, "", ""
		}
		ap := a
		if !filepath.IsAbs(a) {
			var err error
			if ap, err = LookPath(a, pathList); err != nil {
				continue
			}
		}
		if afi, err := os.Stat(ap); err == nil && os.SameFile(fi, afi) {
			return path, fi, "", ""
		}
	}
	return "", nil, ReasonNotAllowed, fmt.Sprintf("executable %q (%s) is not on the machine owner's allow list", argv0, path)
}

// LocalPath checks that name is a relative path that stays inside the
// directory it is joined to: no absolute path, no "..", no empty or "."
// element after cleaning. The executor checks input and output names
// with it too, so that both sides of the supervisor agree.
func LocalPath(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case strings.IndexByte(name, 0) >= 0:
		return errors.New("contains a NUL byte")
	case filepath.IsAbs(name):
		return errors.New("absolute path")
	case !filepath.IsLocal(name):
		return errors.New("escapes the work directory")
	case filepath.Clean(name) == ".":
		return errors.New("names the work directory itself")
	}
	return nil
}
