package peerproc

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Main is the TestMain body of a test package that drives the `peer`
// binary (e2e/, chaos/): unless -short, it builds ./cmd/peer of the module
// (the parent of the package's directory) once into a temporary directory,
// sets *bin to its path, runs the tests and removes the directory. It
// returns the exit code for os.Exit; a failed build is reported under
// name and exits 1.
func Main(m *testing.M, name string, bin *string) int {
	flag.Parse()
	if testing.Short() {
		// Every test of these packages skips itself under -short.
		return m.Run()
	}
	code, err := buildAndRun(m, name, bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return code
}

func buildAndRun(m *testing.M, name string, bin *string) (int, error) {
	wd, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	tmp, err := os.MkdirTemp("", "coopgrid-"+name+"-bin-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	if *bin, err = Build(filepath.Dir(wd), tmp); err != nil {
		return 0, err
	}
	return m.Run(), nil
}
