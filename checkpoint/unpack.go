package checkpoint

import (
	"archive/tar"
	"bufio"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Stats describes a checked archive.
type Stats struct {
	Entries      int
	ContentBytes int64
}

// visitor receives each entry of an archive once its header has passed every
// check. file must read body to its end.
type visitor interface {
	dir(name string, mode fs.FileMode) error
	file(name string, mode fs.FileMode, size int64, body io.Reader) error
}

type entryKind uint8

const (
	kindFile entryKind = iota + 1
	kindDir
	kindImplicitDir // a parent seen only through the names below it
)

// errBudget is returned by budgetReader once the decompressed stream passes
// its budget.
var errBudget = errors.New("decompressed stream over budget")

// scan reads a gzip-compressed tar from r, checks every header against the
// rules and the limits, and hands each entry to v. It reads r to its end:
// data after the tar's end must be zero padding, and nothing may follow the
// gzip member, so that a valid archive has exactly one encoding and every
// byte of it is covered by the gzip checksum.
func scan(ctx context.Context, r io.Reader, limits Limits, v visitor) (Stats, error) {
	var st Stats
	br := bufio.NewReaderSize(r, 64<<10)
	zr, err := gzip.NewReader(br)
	if err != nil {
		return st, mapReadErr("gzip header", err)
	}
	// One member only: a second one would be data that Pack never writes.
	zr.Multistream(false)
	lr := &budgetReader{r: zr, left: limits.decompressedBudget()}
	tr := tar.NewReader(lr)
	seen := map[string]entryKind{}
	for {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, mapReadErr(fmt.Sprintf("header after %d entries", st.Entries), err)
		}
		st.Entries++
		if st.Entries > limits.MaxEntries {
			return st, badf(ErrTooManyEntries, "more than %d entries", limits.MaxEntries)
		}
		name, isDir, err := entryName(hdr)
		if err != nil {
			return st, err
		}
		if err := checkName(name); err != nil {
			return st, err
		}
		if err := recordName(seen, name, isDir); err != nil {
			return st, err
		}
		mode := fs.FileMode(hdr.Mode) & fs.ModePerm
		if isDir {
			if hdr.Size != 0 {
				return st, badf(ErrCorrupt, "directory %q declares %d bytes of data", name, hdr.Size)
			}
			if err := v.dir(name, mode); err != nil {
				return st, err
			}
			continue
		}
		switch {
		case hdr.Size < 0:
			return st, badf(ErrCorrupt, "file %q declares a negative size", name)
		case hdr.Size > limits.MaxFileBytes:
			return st, badf(ErrTooLarge, "file %q of %d bytes, limit %d", name, hdr.Size, limits.MaxFileBytes)
		case hdr.Size > limits.MaxTotalBytes-st.ContentBytes:
			return st, badf(ErrTooLarge, "content over %d bytes at file %q", limits.MaxTotalBytes, name)
		}
		body := &tagReader{r: tr}
		if err := v.file(name, mode, hdr.Size, body); err != nil {
			if body.err != nil {
				return st, mapReadErr(fmt.Sprintf("file %q", name), body.err)
			}
			return st, err
		}
		if body.n != hdr.Size {
			return st, badf(ErrCorrupt, "file %q: read %d of %d bytes", name, body.n, hdr.Size)
		}
		st.ContentBytes += hdr.Size
	}
	// Past the end-of-archive blocks only zero padding may follow. Reading
	// to the end also makes gzip verify its checksum and length.
	if err := drainZeros(lr); err != nil {
		return st, err
	}
	if _, err := br.Peek(1); !errors.Is(err, io.EOF) {
		if err != nil {
			return st, mapReadErr("after the gzip stream", err)
		}
		return st, badf(ErrCorrupt, "trailing bytes after the gzip stream")
	}
	return st, nil
}

// entryName returns the entry's name without a directory's trailing slash,
// and refuses every type but regular files and directories.
func entryName(hdr *tar.Header) (string, bool, error) {
	show := truncate(hdr.Name, 200)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return strings.TrimSuffix(hdr.Name, "/"), true, nil
	case tar.TypeReg: // archive/tar turns the old TypeRegA into TypeReg or TypeDir
		if strings.HasSuffix(hdr.Name, "/") {
			return "", false, badf(ErrUnsafePath, "file entry %q ends in a slash", show)
		}
		return hdr.Name, false, nil
	case tar.TypeSymlink:
		return "", false, badf(ErrUnsupportedEntry, "symbolic link %q -> %q", show, truncate(hdr.Linkname, 200))
	case tar.TypeLink:
		return "", false, badf(ErrUnsupportedEntry, "hard link %q -> %q", show, truncate(hdr.Linkname, 200))
	case tar.TypeChar, tar.TypeBlock:
		return "", false, badf(ErrUnsupportedEntry, "device %q", show)
	case tar.TypeFifo:
		return "", false, badf(ErrUnsupportedEntry, "FIFO %q", show)
	}
	return "", false, badf(ErrUnsupportedEntry, "entry %q of type %q", show, hdr.Typeflag)
}

// recordName refuses duplicates and names that put an entry inside a file
// or a file where a directory already is.
func recordName(seen map[string]entryKind, name string, isDir bool) error {
	if k, ok := seen[name]; ok {
		if !(isDir && k == kindImplicitDir) {
			return badf(ErrUnsafePath, "entry %q appears twice or clashes with a directory", truncate(name, 200))
		}
	}
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		k, ok := seen[p]
		if ok && k == kindFile {
			return badf(ErrUnsafePath, "entry %q is inside the file %q", truncate(name, 200), truncate(p, 200))
		}
		if ok {
			break // its own parents were recorded with it
		}
		seen[p] = kindImplicitDir
	}
	if isDir {
		seen[name] = kindDir
	} else {
		seen[name] = kindFile
	}
	return nil
}

// drainZeros reads r to its end and refuses anything but zero bytes.
func drainZeros(r io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if b != 0 {
				return badf(ErrCorrupt, "data after the end of the tar archive")
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return mapReadErr("end of archive", err)
		}
	}
}

// mapReadErr turns a failure to read the archive into an *ArchiveError
// (truncation, damage, budget) and leaves I/O and context errors alone.
func mapReadErr(where string, err error) error {
	var (
		ce *flate.CorruptInputError
		ae *ArchiveError
	)
	switch {
	case errors.As(err, &ae):
		return err
	case errors.Is(err, errBudget):
		return badf(ErrTooLarge, "%s: %v", where, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return badf(ErrCorrupt, "%s: truncated", where)
	case errors.Is(err, tar.ErrInsecurePath):
		// Only with GODEBUG=tarinsecurepath=0; checkName refuses the same
		// names anyway.
		return badf(ErrUnsafePath, "%s: %v", where, err)
	case errors.As(err, &ce), errors.Is(err, gzip.ErrChecksum), errors.Is(err, gzip.ErrHeader),
		errors.Is(err, tar.ErrHeader), errors.Is(err, tar.ErrFieldTooLong):
		return badf(ErrCorrupt, "%s: %v", where, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err // the disk, not the archive
	}
	// archive/tar reports most malformed headers with plain errors
	// ("invalid PAX record", "strconv..."): they are the archive's fault.
	return badf(ErrCorrupt, "%s: %v", where, err)
}

// budgetReader fails once more than left bytes have been read.
type budgetReader struct {
	r    io.Reader
	left int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// Allow a read that reports only the end of the stream.
		var one [1]byte
		n, err := b.r.Read(one[:])
		if n == 0 && err != nil {
			return 0, err
		}
		return 0, errBudget
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// tagReader remembers the error of the archive side, so that a visitor's
// own failure (a full disk) is not mistaken for a corrupt archive.
type tagReader struct {
	r   io.Reader
	n   int64
	err error
}

func (t *tagReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		t.err = err
	}
	return n, err
}

// ctxReader stops a long read when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

type discardVisitor struct{}

func (discardVisitor) dir(string, fs.FileMode) error { return nil }
func (discardVisitor) file(_ string, _ fs.FileMode, _ int64, body io.Reader) error {
	_, err := io.Copy(io.Discard, body)
	return err
}

// Verify checks the archive at archivePath without extracting it: its hash
// must be wantHash, and every entry must pass the rules Unpack applies.
func Verify(ctx context.Context, archivePath, wantHash string, limits Limits) (Stats, error) {
	if err := limits.validate(); err != nil {
		return Stats{}, err
	}
	limits = limits.withDefaults()
	if err := checkHash(wantHash); err != nil {
		return Stats{}, err
	}
	f, err := openArchive(ctx, archivePath, wantHash, limits)
	if err != nil {
		return Stats{}, fmt.Errorf("verify %s: %w", archivePath, err)
	}
	defer f.Close()
	st, err := scan(ctx, ctxReader{ctx, f}, limits, discardVisitor{})
	if err != nil {
		return st, fmt.Errorf("verify %s: %w", archivePath, err)
	}
	return st, nil
}

// openArchive opens a regular file, refuses it over the size limit, hashes
// all of it and compares with wantHash, then rewinds it.
func openArchive(ctx context.Context, p, wantHash string, limits Limits) (*os.File, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if fi.Size() > limits.MaxArchiveBytes {
		f.Close()
		return nil, badf(ErrTooLarge, "archive of %d bytes, limit %d", fi.Size(), limits.MaxArchiveBytes)
	}
	h := newHasher()
	if _, err := io.Copy(h, ctxReader{ctx, io.LimitReader(f, limits.MaxArchiveBytes+1)}); err != nil {
		f.Close()
		return nil, err
	}
	if got := hashOf(h); got != wantHash {
		f.Close()
		return nil, badf(ErrHashMismatch, "archive hashes to %s, want %s", got, wantHash)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Unpack verifies the archive at archivePath and extracts it into destDir.
//
// The whole archive is hashed first and compared with wantHash; nothing is
// extracted from an archive with the wrong hash. Extraction then goes into a
// fresh temporary directory next to destDir (hashing the bytes again as they
// are read, in case the file changed), and only when every entry has passed
// every check and been written and synced is it renamed to destDir. If
// destDir exists (a directory: an older checkpoint), it is replaced at that
// moment. On any failure the temporary directory is removed and destDir is
// left exactly as it was.
//
// Entries may only be regular files and directories with relative,
// canonical names inside destDir; see Pack. Files and directories get the
// archived permission bits; destDir itself gets 0700 and the times are those
// of the extraction. A missing parent of destDir is created with mode 0711,
// as the executor creates task directories.
//
// Errors caused by the archive are *ArchiveError (errors.Is(err,
// ErrBadArchive)). Only one Unpack into a given destDir may run at a time.
func Unpack(ctx context.Context, archivePath, wantHash, destDir string, limits Limits) error {
	if err := limits.validate(); err != nil {
		return err
	}
	limits = limits.withDefaults()
	if err := checkHash(wantHash); err != nil {
		return err
	}
	if destDir == "" {
		return errors.New("unpack: empty destination")
	}
	dest := filepath.Clean(destDir)
	destExists := false
	switch fi, err := os.Lstat(dest); {
	case err == nil && fi.IsDir():
		destExists = true
	case err == nil:
		return fmt.Errorf("unpack into %s: exists and is not a directory (%s)", dest, fi.Mode().Type())
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("unpack into %s: %w", dest, err)
	}
	f, err := openArchive(ctx, archivePath, wantHash, limits)
	if err != nil {
		return fmt.Errorf("unpack %s: %w", archivePath, err)
	}
	defer f.Close()

	parent, base := filepath.Dir(dest), filepath.Base(dest)
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return fmt.Errorf("unpack into %s: %w", dest, err)
	}
	removeLeftovers(parent, base)
	tmp, err := os.MkdirTemp(parent, "."+base+unpackSuffix)
	if err != nil {
		return fmt.Errorf("unpack into %s: %w", dest, err)
	}
	ok := false
	defer func() {
		if !ok {
			removeTree(tmp)
		}
	}()
	if err := extract(ctx, f, wantHash, tmp, limits); err != nil {
		return fmt.Errorf("unpack %s into %s: %w", archivePath, dest, err)
	}
	if err := swapInto(tmp, dest, destExists); err != nil {
		return fmt.Errorf("unpack into %s: %w", dest, err)
	}
	ok = true
	return nil
}

const (
	unpackSuffix = ".unpack-"
	oldSuffix    = ".old-"
)

// removeLeftovers removes what an interrupted Unpack into parent/base left.
func removeLeftovers(parent, base string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, "."+base+unpackSuffix) || strings.HasPrefix(n, "."+base+oldSuffix) {
			removeTree(filepath.Join(parent, n))
		}
	}
}

// extract writes the archive's entries under tmp through an os.Root, so that
// no name can lead out of it, then applies the directory modes and syncs.
func extract(ctx context.Context, f *os.File, wantHash, tmp string, limits Limits) error {
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return err
	}
	defer root.Close()
	h := newHasher()
	tee := io.TeeReader(ctxReader{ctx, f}, h)
	x := &extractor{root: root, dirs: map[string]fs.FileMode{}}
	if _, err := scan(ctx, tee, limits, x); err != nil {
		return err
	}
	// scan read up to the end of the gzip stream and checked that nothing
	// follows, so tee has seen every byte.
	if got := hashOf(h); got != wantHash {
		return badf(ErrHashMismatch, "archive changed while extracting: now hashes to %s, want %s", got, wantHash)
	}
	return x.finish(tmp)
}

type extractor struct {
	root *os.Root
	// dirs maps every directory created to its final mode.
	dirs map[string]fs.FileMode
}

func (x *extractor) mkdirs(name string, mode fs.FileMode, explicit bool) error {
	if _, ok := x.dirs[name]; !ok {
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if _, ok := x.dirs[p]; ok {
				break
			}
			x.dirs[p] = 0o700
		}
		x.dirs[name] = 0o700
		if err := x.root.MkdirAll(name, 0o700); err != nil {
			return err
		}
	}
	if explicit {
		x.dirs[name] = mode
	}
	return nil
}

func (x *extractor) dir(name string, mode fs.FileMode) error {
	return x.mkdirs(name, mode, true)
}

func (x *extractor) file(name string, mode fs.FileMode, size int64, body io.Reader) error {
	if d := path.Dir(name); d != "." {
		if err := x.mkdirs(d, 0, false); err != nil {
			return err
		}
	}
	out, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.LimitReader(body, size+1))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return x.root.Chmod(name, mode)
}

// finish syncs every directory and then gives each its mode, deepest first
// (a child sorts after its parent), so that a directory without write or
// search permission is closed only after everything below it is done.
func (x *extractor) finish(tmp string) error {
	names := make([]string, 0, len(x.dirs)+1)
	for n := range x.dirs {
		names = append(names, n)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, n := range append(names, ".") {
		if err := syncDirIn(x.root, n); err != nil {
			return err
		}
	}
	for _, n := range names {
		if err := x.root.Chmod(n, x.dirs[n]); err != nil {
			return err
		}
	}
	return os.Chmod(tmp, 0o700)
}

func syncDirIn(root *os.Root, name string) error { return syncOpened(root.Open(name)) }

// swapInto renames the complete tree tmp to dest. An existing dest is first
// moved aside, so that the rename cannot fail halfway into a mixed tree, and
// is put back if the rename fails.
func swapInto(tmp, dest string, destExists bool) error {
	parent := filepath.Dir(dest)
	if !destExists {
		if err := os.Rename(tmp, dest); err != nil {
			return err
		}
		return syncDir(parent)
	}
	aside, err := os.MkdirTemp(parent, "."+filepath.Base(dest)+oldSuffix)
	if err != nil {
		return err
	}
	old := filepath.Join(aside, "d")
	if err := os.Rename(dest, old); err != nil {
		os.Remove(aside)
		return err
	}
	if err := os.Rename(tmp, dest); err != nil {
		if rerr := os.Rename(old, dest); rerr != nil {
			return fmt.Errorf("%w (and the previous content, kept in %s, could not be put back: %v)", err, old, rerr)
		}
		os.Remove(aside)
		return err
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	removeTree(aside)
	return nil
}

func syncDir(dir string) error { return syncOpened(os.Open(dir)) }

// syncOpened syncs the directory open returned and closes it: the first
// error of the three.
func syncOpened(d *os.File, err error) error {
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeTree removes a tree even where its directories lack write or search
// permission for their owner (a restored checkpoint keeps the task's modes).
// It never follows a symbolic link.
func removeTree(p string) {
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(q, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(p)
}
