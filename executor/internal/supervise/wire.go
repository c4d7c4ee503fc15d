package supervise

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The peer and its supervisor talk over one Unix stream socket (the
// supervisor's fd 3): frames of a 4-byte big-endian length and a JSON
// message. An open request carries the run's stdout and stderr as
// SCM_RIGHTS with its first bytes; since requests are read in order, the
// descriptors received are taken in order too.

// Operations.
const (
	// peer → supervisor
	opOpen   = "open"   // Run, Marker, Config; fds: stdout, stderr
	opGo     = "go"     // Run, StartByUs: the gate opened
	opAbort  = "abort"  // Run: the gate stays closed; kill the held task
	opRenew  = "renew"  // the peer renews every run's lease
	opSignal = "signal" // Run, Sig: SIGTERM or SIGKILL to the run's process group (stop)
	// supervisor → peer
	opHeld = "held" // Run, Pid: the task is stopped before its first instruction, confined
	opEnd  = "end"  // Run, Status: the run is over, every process of it gone
)

// maxFrame bounds a message: argv and environment take at most 1 MiB
// (the executor's limit), which JSON may escape to a few times that.
const maxFrame = 16 << 20

// message is every frame; Op says which fields count.
type message struct {
	Op        string  `json:"op"`
	Run       uint64  `json:"run,omitempty"`
	Marker    string  `json:"marker,omitempty"`
	Config    *Config `json:"config,omitempty"`
	StartByUs int64   `json:"start_by_us,omitempty"`
	Pid       int     `json:"pid,omitempty"`
	Sig       int     `json:"sig,omitempty"`
	Status    *Status `json:"status,omitempty"`
}

// wire is one end of the socket.
type wire struct {
	c   *net.UnixConn
	wmu sync.Mutex
	r   *bufio.Reader
	fr  *fdReader
}

func newWire(f *os.File) (*wire, error) {
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	c, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, fmt.Errorf("not a Unix socket: %T", fc)
	}
	fr := &fdReader{c: c}
	return &wire{c: c, r: bufio.NewReaderSize(fr, 64<<10), fr: fr}, nil
}

// send writes one frame, with files passed along (SCM_RIGHTS).
func (w *wire) send(m *message, files ...*os.File) error {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	return w.sendFds(m, fds...)
}

// sendFds writes one frame, with descriptors passed along (SCM_RIGHTS).
func (w *wire) sendFds(m *message, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	frame := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[4:], b)
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if len(fds) == 0 {
		_, err := w.c.Write(frame)
		return err
	}
	n, _, err := w.c.WriteMsgUnix(frame, unix.UnixRights(fds...), nil)
	if err == nil && n < len(frame) {
		_, err = w.c.Write(frame[n:])
	}
	return err
}

// recv reads the next frame.
func (w *wire) recv() (*message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(w.r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes, limit %d", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(w.r, b); err != nil {
		return nil, err
	}
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("malformed message: %w", err)
	}
	return &m, nil
}

// takeFds returns the next n descriptors received (the caller closes
// them). Plain descriptors: an os.File would cost a system call each to
// find its kind, for streams the supervisor only hands to a task.
func (w *wire) takeFds(n int) ([]int, error) {
	w.fr.mu.Lock()
	defer w.fr.mu.Unlock()
	if len(w.fr.fds) < n {
		return nil, errors.New("a request came without its descriptors")
	}
	out := append([]int(nil), w.fr.fds[:n]...)
	w.fr.fds = w.fr.fds[n:]
	return out, nil
}

func (w *wire) close() error { return w.c.Close() }

// fdReader reads the stream and keeps the descriptors that come with it.
type fdReader struct {
	c   *net.UnixConn
	mu  sync.Mutex
	fds []int
	oob [256]byte
}

func (r *fdReader) Read(p []byte) (int, error) {
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, r.oob[:])
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(r.oob[:oobn])
		if perr == nil {
			for _, m := range msgs {
				fds, ferr := unix.ParseUnixRights(&m)
				if ferr != nil {
					continue
				}
				r.mu.Lock()
				// Already close-on-exec: the net package receives with
				// MSG_CMSG_CLOEXEC on Linux (a task forked meanwhile never
				// inherits another run's streams).
				r.fds = append(r.fds, fds...)
				r.mu.Unlock()
			}
		}
	}
	if n < 0 {
		n = 0
	}
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}
