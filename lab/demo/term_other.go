//go:build !unix

package demo

import "io"

// terminalWidth never finds a terminal here: the demo prints plain lines.
func terminalWidth(io.Writer) (int, bool) { return 0, false }
