package supervise

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/coopgrid/coopgrid/internal/safeopen"
	"golang.org/x/sys/unix"
)

// CopierArg0 selects the output copier, with Env set to CopierMode: the
// process that copies a finished run's outputs out of its work directory
// (docs/EXECUTOR.md, "Outputs"). The peer starts it with no privilege the
// task lacked: as the run's user (run_as), or, for a task that ran as the
// peer's user, in the task's Landlock sandbox; always with no_new_privs.
//
// It reads a CopyConfig on fd 3 (to EOF), writes the files it could open
// as a tar stream on stdout (regular entries only, named as asked), and
// then a CopyReport on fd 4. The peer treats both as hostile: the copier
// runs as the task's user, whose leftover processes could tamper with it.
const (
	CopierArg0 = "coopgrid-copier"
	CopierMode = "copier"
)

// fdReport is the copier's report descriptor.
const fdReport = 4

// CopierExitTooLarge: the copier stopped because the outputs, as opened,
// take more than CopyConfig.MaxBytes.
const CopierExitTooLarge = 3

// errTooLarge is CopyOut's error past CopyConfig.MaxBytes.
var errTooLarge = errors.New("outputs too large")

// CopyConfig is what the peer asks the copier to copy.
type CopyConfig struct {
	// Root is the work directory; Names the listed outputs, slash-separated
	// paths relative to Root.
	Root  string   `json:"root"`
	Names []string `json:"names"`
	// UID is the run's user: a file owned by anyone else is not copied.
	UID int `json:"uid"`
	// MaxBytes bounds the sum of the sizes copied (the owner's
	// max_output_bytes): re-checked here, on the files as opened.
	MaxBytes int64 `json:"max_bytes"`
}

// CopyReport says which names the copier did not copy, and why.
type CopyReport struct {
	Skipped []CopySkip `json:"skipped,omitempty"`
}

// CopySkip is one name not copied.
type CopySkip struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// copierMain runs in the copier process.
func copierMain() int {
	for _, fd := range []int{fdConfig, fdReport} {
		unix.CloseOnExec(fd)
	}
	// A process of the task's user left behind must not attach to the
	// copier (ptrace needs the target dumpable, or CAP_SYS_PTRACE).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	var cfg CopyConfig
	if err := readConfig(fdConfig, &cfg); err != nil {
		return helperFail(CopierArg0, err)
	}
	rep, err := CopyOut(&cfg, os.Stdout)
	if errors.Is(err, errTooLarge) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", CopierArg0, err)
		return CopierExitTooLarge
	}
	if err != nil {
		return helperFail(CopierArg0, err)
	}
	_ = os.Stdout.Close()
	if err := json.NewEncoder(os.NewFile(fdReport, "report")).Encode(rep); err != nil {
		return helperFail(CopierArg0, err)
	}
	return 0
}

// CopyOut writes cfg's files to w as a tar stream. Each is opened with
// internal/safeopen beneath cfg.Root: no symbolic link anywhere on the way,
// nothing outside Root, a regular file with one link, owned by cfg.UID;
// one that fails is skipped and named in the report. Its size is read from
// the open file and counted against cfg.MaxBytes (over it, the copy
// fails); exactly that many bytes are copied.
func CopyOut(cfg *CopyConfig, w io.Writer) (CopyReport, error) {
	var rep CopyReport
	tw := tar.NewWriter(w)
	var total int64
	for _, name := range cfg.Names {
		f, err := safeopen.OpenOwned(cfg.Root, filepath.FromSlash(name), cfg.UID)
		if err != nil {
			rep.Skipped = append(rep.Skipped, CopySkip{Name: name, Reason: skipReason(err)})
			continue
		}
		err = copyOne(tw, f, name, cfg.MaxBytes, &total)
		f.Close()
		if err != nil {
			return rep, err
		}
	}
	if err := tw.Close(); err != nil {
		return rep, fmt.Errorf("outputs stream: %w", err)
	}
	return rep, nil
}

func copyOne(tw *tar.Writer, f *os.File, name string, max int64, total *int64) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("output %s: %w", name, err)
	}
	size := fi.Size()
	if *total += size; *total > max {
		return fmt.Errorf("%w: they take more than %d bytes as opened", errTooLarge, max)
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o600}); err != nil {
		return fmt.Errorf("output %s: %w", name, err)
	}
	if _, err := io.CopyN(tw, f, size); err != nil {
		return fmt.Errorf("output %s: %w (it changed while being copied)", name, err)
	}
	return nil
}

// skipReason says in a few words why an output could not be opened.
func skipReason(err error) string {
	switch {
	case errors.Is(err, unix.ELOOP):
		return "a symbolic link on its path: outputs must be regular files"
	case errors.Is(err, unix.EXDEV):
		return "its path leaves the work directory"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return "the run's user may not read it"
	case errors.Is(err, unix.ENOENT):
		return "gone since it was listed"
	case errors.Is(err, safeopen.ErrOwner), errors.Is(err, safeopen.ErrNotRegular):
		return errors.Unwrap(err).Error()
	}
	return err.Error()
}
