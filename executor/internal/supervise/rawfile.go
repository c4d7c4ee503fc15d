package supervise

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// The files of /proc and of the cgroup file systems that a run reads or
// writes a few times each (cgroup.procs, /proc/PID/stat) are read with
// plain system calls: an os.File costs an fstat, a try at the poller and
// an allocation on top of the open and the close, and these are
// a good part of the system calls of a short run (issue 22).

// ReadSmall reads the whole of a small file at path into buf's storage
// (grown as needed) and returns it.
func ReadSmall(path string, buf []byte) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, max(512, cap(buf)))...)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// procsWriter writes pids into cgroup.procs files, keeping each file open
// for the next run: the executor reuses its cgroups (one per run in
// progress, kept between runs), so the same few files recur. A file whose
// cgroup was removed meanwhile fails the write; it is opened again once.
type procsWriter struct {
	mu  sync.Mutex
	fds map[string]int
}

// procsWriterMax bounds the open files; all are closed when it is reached.
const procsWriterMax = 256

// write writes pid (decimal) into the cgroup.procs file path.
func (w *procsWriter) write(path string, pid []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for attempt := 0; ; attempt++ {
		fd, ok := w.fds[path]
		if !ok {
			var err error
			if fd, err = openRetry(path, unix.O_WRONLY|unix.O_CLOEXEC); err != nil {
				return err
			}
			if w.fds == nil || len(w.fds) >= procsWriterMax {
				w.closeAll()
				w.fds = map[string]int{}
			}
			w.fds[path] = fd
		}
		_, err := unix.Pwrite(fd, pid, 0)
		if err == nil {
			return nil
		}
		unix.Close(fd)
		delete(w.fds, path)
		if ok && attempt == 0 {
			continue // a kept file gone stale: open it again
		}
		return err
	}
}

func (w *procsWriter) closeAll() {
	for p, fd := range w.fds {
		unix.Close(fd)
		delete(w.fds, p)
	}
}
