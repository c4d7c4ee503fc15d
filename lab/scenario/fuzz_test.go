package scenario

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/internal/yamlfile"
)

// FuzzParse: Parse never panics; every error is an *yamlfile.Error naming the file,
// on every line; whatever parses resolves into a valid Instance, with
// nobody late and with each organisation late at 80 %.
//
// The seed corpus is the example files plus testdata/fuzz/FuzzParse.
// Run longer with: go test -run '^$' -fuzz FuzzParse ./lab/scenario/
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fz.yaml"
		s, err := Parse(name, data)
		if err != nil {
			if s != nil {
				t.Fatal("scenario returned with an error")
			}
			var e *yamlfile.Error
			if !errors.As(err, &e) || e.File != name {
				t.Fatalf("error %q is not an *yamlfile.Error naming the file", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, name+":") {
					t.Fatalf("error line %q does not name the file", line)
				}
			}
			return
		}
		// Keep each input cheap: a valid file may ask for a million tasks.
		machines, tasks := 0, len(s.explicit)
		for _, o := range s.orgs {
			for _, g := range o.groups {
				machines += g.count
			}
			for _, c := range o.mix {
				tasks += c
			}
		}
		if machines > 10000 || tasks > 10000 {
			return
		}
		lates := append([]string{"none"}, s.OrgNames()...)
		for _, late := range lates {
			opts := Options{Late: late}
			if late != "none" {
				opts.LateLimit = "80%"
			}
			in, err := s.Instance(opts, 1)
			if err != nil {
				t.Fatalf("parsed but does not resolve with %+v: %v", opts, err)
			}
			if len(in.Machines) != machines || len(in.Tasks) != tasks {
				t.Fatalf("%d machines, %d tasks; want %d, %d", len(in.Machines), len(in.Tasks), machines, tasks)
			}
			checkInstance(t, in)
		}
	})
}
