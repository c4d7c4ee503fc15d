package checkpoint

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// Archive describes a packed checkpoint.
type Archive struct {
	// Hash is "sha256:<hex>" of the compressed archive's bytes.
	Hash string
	// Size is the compressed archive's size in bytes.
	Size int64
	// Entries counts the files and directories; ContentBytes sums the
	// files' sizes.
	Entries      int
	ContentBytes int64
	// Path is where the archive lives, when it is in a Store.
	Path string
}

// epoch is the modification time of every entry: a checkpoint is named by
// its content, so the time it was written must not change its name.
var epoch = time.Unix(0, 0)

// Pack writes a deterministic gzip-compressed tar of the directory dir to w
// and returns its hash and size.
//
// Entries are the directories and regular files under dir, in lexical
// depth-first order, with their permission bits (0777) and nothing else: no
// times, owners, extended attributes or special bits. The gzip header is
// empty (no name, no time). So the same content always gives the same
// bytes, and the same hash, with the same Go version.
//
// Symbolic links, devices, FIFOs and sockets are refused with
// ErrUnsupportedEntry: a checkpoint must be plain data, and refusing links
// is the simplest way to never follow one out of dir. (Two hard links to
// one file are two names of a regular file: each is packed as a copy.) dir itself must be a real
// directory, not a link. Files are read through an os.Root opened on dir, so
// a file swapped for a link while packing still cannot lead out of dir.
//
// Over the limits, Pack fails with ErrTooLarge or ErrTooManyEntries. On any
// error what was written to w is not a valid archive and must be dropped.
func Pack(ctx context.Context, dir string, w io.Writer, limits Limits) (Archive, error) {
	if err := limits.validate(); err != nil {
		return Archive{}, err
	}
	limits = limits.withDefaults()
	fi, err := os.Lstat(dir)
	if err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return Archive{}, fmt.Errorf("pack %s: not a directory (mode %s): %w", dir, fi.Mode().Type(), ErrUnsupportedEntry)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	defer root.Close()

	h := newHasher()
	cw := &countingWriter{w: io.MultiWriter(w, h), limit: limits.MaxArchiveBytes}
	bw := bufio.NewWriterSize(cw, 64<<10)
	zw, err := gzip.NewWriterLevel(bw, gzip.DefaultCompression)
	if err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	tw := tar.NewWriter(zw)
	a := Archive{}
	walkErr := fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == "." {
			return nil
		}
		if err := checkName(name); err != nil {
			// A name Unpack would refuse; not an archive error here.
			var ae *ArchiveError
			if errors.As(err, &ae) {
				return fmt.Errorf("%s: %w", ae.Msg, ae.Kind)
			}
			return err
		}
		a.Entries++
		if a.Entries > limits.MaxEntries {
			return fmt.Errorf("more than %d entries: %w", limits.MaxEntries, ErrTooManyEntries)
		}
		switch t := d.Type(); {
		case t.IsDir():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{
				Typeflag: tar.TypeDir,
				Name:     name + "/",
				Mode:     int64(info.Mode().Perm()),
				ModTime:  epoch,
			})
		case t.IsRegular():
			n, err := packFile(root, tw, name, limits.MaxFileBytes, limits.MaxTotalBytes-a.ContentBytes)
			a.ContentBytes += n
			return err
		default:
			return fmt.Errorf("%s: %s is neither a regular file nor a directory: %w", name, t, ErrUnsupportedEntry)
		}
	})
	if walkErr != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, walkErr)
	}
	if err := tw.Close(); err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	if err := zw.Close(); err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	if err := bw.Flush(); err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	a.Hash, a.Size = hashOf(h), cw.n
	return a, nil
}

// packFile writes one regular file. It opens the file without following a
// final symlink and without blocking on a FIFO, and checks that what it
// opened is still a regular file: the task may still be running.
func packFile(root *os.Root, tw *tar.Writer, name string, maxFile, totalLeft int64) (int64, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: changed into %s while packing: %w", name, fi.Mode().Type(), ErrUnsupportedEntry)
	}
	size := fi.Size()
	if size > maxFile {
		return 0, fmt.Errorf("%s: file of %d bytes, limit %d: %w", name, size, maxFile, ErrTooLarge)
	}
	if size > totalLeft {
		return 0, fmt.Errorf("%s: content over the total limit: %w", name, ErrTooLarge)
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     int64(fi.Mode().Perm()),
		Size:     size,
		ModTime:  epoch,
	}); err != nil {
		return 0, err
	}
	n, err := io.CopyN(tw, f, size)
	if errors.Is(err, io.EOF) {
		return n, fmt.Errorf("%s: shrank from %d to %d bytes while packing", name, size, n)
	}
	return n, err
}

// countingWriter counts bytes and fails once they pass limit.
type countingWriter struct {
	w     io.Writer
	n     int64
	limit int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.limit {
		return 0, fmt.Errorf("archive over %d bytes: %w", c.limit, ErrTooLarge)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
