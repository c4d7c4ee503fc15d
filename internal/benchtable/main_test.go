package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	in := `goos: linux
goarch: amd64
pkg: github.com/coopgrid/coopgrid/policy
cpu: AMD EPYC
BenchmarkEHOSEPBacklog-2   	       3	  49952880 ns/op	     10006 decisions/op	    200309 decisions/s
PASS
pkg: github.com/coopgrid/coopgrid/ledger
BenchmarkApply-2   	 100	  2400 ns/op	  63 B/op
ok  	github.com/coopgrid/coopgrid/ledger	1.0s
`
	var out bytes.Buffer
	if err := run(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"Measured on: goos: linux, goarch: amd64, cpu: AMD EPYC",
		"### github.com/coopgrid/coopgrid/policy",
		"| benchmark | ns/op | decisions/op | decisions/s |",
		"| EHOSEPBacklog-2 | 49952880 | 10006 | 200309 |",
		"| benchmark | ns/op | B/op |",
		"| Apply-2 | 2400 | 63 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
