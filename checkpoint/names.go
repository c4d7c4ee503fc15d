package checkpoint

import (
	"path"
	"strings"
	"unicode/utf8"
)

// checkName validates an entry name (without the trailing slash of a
// directory). The rules are the same for Pack and Unpack, so that whatever
// Pack writes, Unpack accepts:
//
//   - relative, canonical (path.Clean leaves it unchanged), not ".";
//   - no ".." component, no NUL, valid UTF-8;
//   - at most maxNameBytes, each component at most maxComponentBytes.
func checkName(name string) error {
	switch {
	case name == "" || name == ".":
		return badf(ErrUnsafePath, "empty entry name")
	case len(name) > maxNameBytes:
		return badf(ErrUnsafePath, "entry name of %d bytes, limit %d", len(name), maxNameBytes)
	case strings.HasPrefix(name, "/"):
		return badf(ErrUnsafePath, "absolute entry name %q", truncate(name, 200))
	case strings.ContainsRune(name, 0):
		return badf(ErrUnsafePath, "entry name %q contains NUL", truncate(name, 200))
	case !utf8.ValidString(name):
		return badf(ErrUnsafePath, "entry name %q is not UTF-8", truncate(name, 200))
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return badf(ErrUnsafePath, "entry name %q leaves the directory", truncate(name, 200))
		}
		if len(c) > maxComponentBytes {
			return badf(ErrUnsafePath, "entry name %q has a component over %d bytes", truncate(name, 200), maxComponentBytes)
		}
	}
	if path.Clean(name) != name {
		return badf(ErrUnsafePath, "entry name %q is not canonical", truncate(name, 200))
	}
	return nil
}
