package jobfile

import (
	"strings"
	"testing"
)

// BenchmarkParseTemplate expands a template to the maximum number of
// tasks (100,000), with placeholders in argv, env and outputs.
func BenchmarkParseTemplate(b *testing.B) {
	src := []byte(`
defaults: {size: 1.5, wall_clock_limit: 1h}
template:
  count: 10000
  params: {alpha: [0.1, 0.2, 0.3, 0.4, 0.5], seed: [1, 2]}
  name: "a{{param.alpha}}-s{{param.seed}}-{{index}}"
  argv: [/bin/sh, -c, "run --alpha {{param.alpha}} --seed {{param.seed}} > out-{{index}}.txt"]
  env: {INDEX: "{{index}}", COUNT: "{{count}}"}
  outputs: ["out-{{index}}.txt"]
`)
	b.ReportAllocs()
	for b.Loop() {
		job, err := Parse("bench.yaml", src, Options{})
		if err != nil || len(job.Tasks) != 100_000 {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseLargeList parses a list of tasks close to the 1 MiB file
// limit.
func BenchmarkParseLargeList(b *testing.B) {
	src := []byte(largeList())
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("bench.yaml", src, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRejectNodeBomb: a 1 MiB file of tiny scalars, rejected for its
// node count.
func BenchmarkRejectNodeBomb(b *testing.B) {
	src := []byte("tasks: [" + strings.Repeat("a,", (1<<20-16)/2) + "a]\n")
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("bench.yaml", src, Options{}); err == nil || !strings.Contains(err.Error(), "more than 250000 YAML nodes") {
			b.Fatal(err)
		}
	}
}

func largeList() string {
	var sb strings.Builder
	sb.WriteString("defaults: {wall_clock_limit: 1h}\ntasks:\n")
	for i := 0; sb.Len() < 1<<20-200; i++ {
		sb.WriteString("  - {argv: [/bin/sh, run.sh, \"{{index}}\"], size: 2.5, outputs: [\"out-{{index}}\"]}\n")
	}
	return sb.String()
}
