//go:build unix

package demo

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth returns the width in columns of the terminal w writes to,
// and false when w is not a terminal (a pipe, a file, /dev/null).
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, false
	}
	if ws.Col == 0 {
		return 80, true
	}
	return int(ws.Col), true
}
