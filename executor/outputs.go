package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
)

// maxWalkEntries bounds the scan of a work directory for outputs, so a task
// that leaves millions of files cannot stall its own result.
const maxWalkEntries = 1_000_000

var errTooMany = errors.New("too many entries")

// matchOutput reports whether rel, or one of the directories containing it,
// matches one of the patterns: a pattern naming a directory collects the
// files under it.
func matchOutput(patterns []string, rel string) bool {
	for _, pat := range patterns {
		for p := rel; ; {
			if ok, _ := filepath.Match(pat, p); ok {
				return true
			}
			d := filepath.Dir(p)
			if d == "." || d == p {
				break
			}
			p = d
		}
	}
	return false
}

// collectOutputs lists the regular files under workDir matched by patterns
// (relative path → workDir/relative path). It never leaves workDir and
// follows no symbolic link: links, and anything else that is not a
// regular file with one link, are skipped and named in skipped. The list
// is a snapshot: the output copier opens each again without following
// links (internal/safeopen), since a process of the task's user may still
// change the directory. A file not
// owned by uid, the run's user, is skipped and named too: the task could
// not have made it itself (a set-user-ID helper gave it to root, or another
// user planted it), and the peer, perhaps root, must not read it on the
// task's behalf. Over maxFiles files or maxBytes bytes it returns
// ReasonOutputTooLarge and no outputs.
func collectOutputs(workDir string, patterns []string, uid uint32, maxBytes int64, maxFiles int) (out map[string]string, skipped []string, terr *taskError) {
	if len(patterns) == 0 {
		return nil, nil, nil
	}
	root, err := filepath.EvalSymlinks(workDir)
	if err != nil {
		return nil, nil, failf(ReasonOutputFailed, "outputs: %v", err)
	}
	out = make(map[string]string)
	var total int64
	entries := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// An unreadable subdirectory is skipped, not fatal: the task
			// may have made it unreadable itself.
			if p != root && d != nil && d.IsDir() {
				skipped = append(skipped, fmt.Sprintf("%s (%v)", p, err))
				return fs.SkipDir
			}
			return err
		}
		if p == root {
			return nil
		}
		if entries++; entries > maxWalkEntries {
			return errTooMany
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if d.IsDir() || !matchOutput(patterns, rel) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// Never followed: the shipper opens outputs without following
			// links (transfer, internal/safeopen), so a link listed here
			// could not be read, and its target can change after listing.
			skipped = append(skipped, rel+" (symbolic link: outputs must be regular files)")
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			skipped = append(skipped, fmt.Sprintf("%s (%s: outputs must be regular files)", rel, fileKind(fi.Mode())))
			return nil
		}
		o, ok := statOwner(fi)
		if !ok || o.uid != uid {
			skipped = append(skipped, fmt.Sprintf("%s (owned by uid %d, not the run's user uid %d: outputs must be the task's own files)", rel, o.uid, uid))
			return nil
		}
		if o.nlink != 1 {
			// Another name of the same file, perhaps outside the work
			// directory: not necessarily the task's to ship.
			skipped = append(skipped, fmt.Sprintf("%s (%d hard links: outputs must be files with one name)", rel, o.nlink))
			return nil
		}
		target := p
		total += fi.Size()
		out[rel] = target
		if len(out) > maxFiles {
			return fmt.Errorf("more than %d output files: %w", maxFiles, errTooMany)
		}
		if total > maxBytes {
			return fmt.Errorf("outputs take more than %d bytes: %w", maxBytes, errTooMany)
		}
		return nil
	})
	switch {
	case errors.Is(err, errTooMany):
		if err == errTooMany {
			err = fmt.Errorf("work directory has more than %d entries", maxWalkEntries)
		}
		return nil, skipped, failf(ReasonOutputTooLarge, "%v", err)
	case err != nil:
		return nil, skipped, failf(ReasonOutputFailed, "outputs: %v", err)
	}
	return out, skipped, nil
}

// chownTree gives dir and everything under it to uid:gid, without following
// symbolic links, so that a task running as that user can use files the
// peer put there (inputs, a restored checkpoint).
func chownTree(dir string, uid, gid uint32) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
}

type owner struct {
	uid, gid uint32
	nlink    uint64
}

func statOwner(fi os.FileInfo) (owner, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return owner{}, false
	}
	return owner{uid: st.Uid, gid: st.Gid, nlink: uint64(st.Nlink)}, true
}

// fileKind names what a non-regular file is.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "not a regular file"
}

// outputs lists the run's outputs in its work directory (collectOutputs)
// and has the output copier copy them into the run's staging directory,
// from which they are shipped (relative path → staged file). The copier
// runs as the run's user: run_as, or the peer's own user in the task's
// Landlock sandbox (only its work directory reachable under the data
// directory), or, when the owner opted into unsafe_run_as_peer_user, the
// peer's user with nothing to drop. What it cannot open as the task
// could, or finds swapped since the listing, it skips, and skipped says
// why.
func (e *ProcessExecutor) outputs(spec *TaskSpec, dirs taskDirs, runAs bool, uid, gid uint32) (map[string]string, []string, *taskError) {
	pol := e.cfg.Policy
	owner := uint32(os.Geteuid())
	if runAs {
		owner = uid
	}
	listed, skipped, te := collectOutputs(dirs.work, spec.OutputPatterns, owner, pol.maxOutputBytes(), pol.maxOutputFiles())
	if te != nil || len(listed) == 0 {
		return listed, skipped, te
	}
	if e.afterListing != nil {
		e.afterListing(dirs.work)
	}
	j := copyJob{work: dirs.work, staging: e.stagingDir(spec.ID, dirs.attempt), uid: owner,
		maxBytes: pol.maxOutputBytes(), maxFiles: pol.maxOutputFiles()}
	for rel := range listed {
		j.names = append(j.names, filepath.ToSlash(rel))
	}
	sort.Strings(j.names)
	if runAs {
		j.cred = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	} else if e.sandbox {
		j.sandbox = &supervise.Landlock{Hide: e.cfg.HideDir, Allow: []string{dirs.work}}
	}
	staged, more, te := e.stage(j)
	return staged, append(skipped, more...), te
}
