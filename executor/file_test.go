package executor

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseMachinesFile(t *testing.T) {
	const good = `
machines:
  - name: node1
    gflops: 120.5
    busy_watts: 180
    idle_watts: 40
  - name: node-2.small
    busy_watts: 35.5
policy:
  allow: [/usr/bin/python3, sh]
  allow_any: false
  run_as: nobody
  path: /opt/bin:/usr/bin
  max_wall_clock: 12h
  kill_grace: 10s
  max_cpu_seconds: 36000
  max_address_space_bytes: 8589934592
  max_processes: 256
  max_input_bytes: 1000
  max_output_bytes: 2000
  max_output_files: 30
  max_log_bytes: 4000
`
	f, err := ParseMachinesFile("m.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := &MachinesFile{
		Machines: []MachineConfig{
			{Name: "node1", GFLOPS: 120.5, BusyWatts: 180, IdleWatts: 40},
			{Name: "node-2.small", BusyWatts: 35.5}, // GFLOPS 0: to be measured
		},
		Policy: Policy{
			Allow: []string{"/usr/bin/python3", "sh"}, RunAs: "nobody", Path: "/opt/bin:/usr/bin",
			MaxWallClock: 12 * time.Hour, KillGrace: 10 * time.Second, MaxCPUSeconds: 36000,
			MaxAddressSpaceBytes: 8 << 30, MaxProcesses: 256, MaxInputBytes: 1000,
			MaxOutputBytes: 2000, MaxOutputFiles: 30, MaxLogBytes: 4000,
		},
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("got  %+v\nwant %+v", f, want)
	}
	if m := f.Machines[0]; m.MFLOPS() != 120_500 || m.BusyMilliW() != 180_000 || m.IdleMilliW() != 40_000 {
		t.Errorf("integer units: %d MFLOPS %d mW %d mW", m.MFLOPS(), m.BusyMilliW(), m.IdleMilliW())
	}
	// Without a policy nothing may run.
	f, err = ParseMachinesFile("m.yaml", []byte("machines:\n  - {name: a, gflops: 1, busy_watts: 2}\n"))
	if err != nil || !reflect.DeepEqual(f.Policy, Policy{}) {
		t.Errorf("minimal file: %v %+v", err, f)
	}
}

func TestParseMachinesFileErrors(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"empty", "", "m.yaml: empty file"},
		{"syntax", "machines: [\n", "m.yaml:1: did not find expected node content"},
		{"not a mapping", "- a\n", "m.yaml:1: want a mapping, got a list"},
		{"no machines", "policy: {}\n", "m.yaml:1: machines: missing"},
		{"empty machines", "machines: []\n", "m.yaml:1: machines: empty list"},
		{"unknown top key after machines", "machines:\n  - {name: a, busy_watts: 1}\nextra: 1\n", "m.yaml:3: extra: unknown key"},
		{"machines not a list", "machines: {a: 1}\n", "m.yaml:1: machines: want a list of machines, got a mapping"},
		{"unknown machine key", "machines:\n  - name: a\n    busy_watts: 1\n    gflop: 3\n", "m.yaml:4: machines[0].gflop: unknown key"},
		{"missing name", "machines:\n  - busy_watts: 1\n", "m.yaml:2: machines[0].name: missing"},
		{"missing busy", "machines:\n  - name: a\n    gflops: 1\n", "m.yaml:2: machines[0].busy_watts: missing"},
		{"negative gflops", "machines:\n  - name: a\n    gflops: -3\n    busy_watts: 1\n", "m.yaml:3: machines[0].gflops: must not be negative, got -3"},
		{"zero gflops", "machines:\n  - name: a\n    gflops: 0\n    busy_watts: 1\n", "m.yaml:3: machines[0].gflops: must be positive"},
		{"nan watts", "machines:\n  - name: a\n    busy_watts: .nan\n", "m.yaml:3: machines[0].busy_watts: want a finite number, got .nan"},
		{"inf watts", "machines:\n  - name: a\n    busy_watts: .inf\n", "m.yaml:3: machines[0].busy_watts: want a finite number"},
		{"string watts", "machines:\n  - name: a\n    busy_watts: lots\n", `m.yaml:3: machines[0].busy_watts: want a number, got "lots"`},
		{"zero watts", "machines:\n  - name: a\n    busy_watts: 0\n", "m.yaml:3: machines[0].busy_watts: must be positive"},
		{"idle over busy", "machines:\n  - name: a\n    busy_watts: 10\n    idle_watts: 20\n", "m.yaml:2: machines[0].idle_watts: 20 is more than busy_watts 10"},
		{"bad name", "machines:\n  - name: ../x\n    busy_watts: 1\n", `m.yaml:2: machines[0].name: "../x": want`},
		{"numeric name", "machines:\n  - name: 12\n    busy_watts: 1\n", `m.yaml:2: machines[0].name: want a string, got "12"`},
		{"duplicate name", "machines:\n  - {name: a, busy_watts: 1}\n  - {name: a, busy_watts: 2}\n", `m.yaml:3: machines[1].name: machine "a" already declared at line 2`},
		{"duplicate key", "machines:\n  - name: a\n    busy_watts: 1\n    busy_watts: 2\n", "m.yaml:4: machines[0].busy_watts: duplicate key"},
		{"alias", "machines:\n  - &m {name: a, busy_watts: 1}\n  - *m\n", "m.yaml:3: machines[1]: aliases are not supported"},
		{"null value", "machines:\n  - name: a\n    busy_watts:\n", "m.yaml:3: machines[0].busy_watts: want a value, got nothing"},
		{"unknown policy key", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  allow_all: true\n", "m.yaml:4: policy.allow_all: unknown key"},
		{"relative allow", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  allow: [sh, bin/python]\n", "m.yaml:4: policy.allow[1]: allow: \"bin/python\": want an absolute path or a bare name"},
		{"bad duration", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  max_wall_clock: 12\n", "m.yaml:4: policy.max_wall_clock: want a duration"},
		{"negative duration", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  kill_grace: -1s\n", "m.yaml:4: policy.kill_grace: must not be negative"},
		{"negative count", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  max_cpu_seconds: -5\n", "m.yaml:4: policy.max_cpu_seconds: must not be negative"},
		{"fractional count", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  max_log_bytes: 1.5\n", `m.yaml:4: policy.max_log_bytes: want a whole number, got "1.5"`},
		{"bool as string", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  allow_any: \"yes\"\n", `m.yaml:4: policy.allow_any: want true or false`},
		{"root run_as", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  run_as: \"0:0\"\n", "m.yaml:4: policy.run_as: must be an unprivileged user"},
		{"relative path", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  path: /bin:bin\n", `m.yaml:4: policy.path: path: element "bin" is not absolute`},
		{"bad memory", "machines:\n  - name: a\n    busy_watts: 1\n    memory: lots\n", `m.yaml:4: machines[0].memory: want a size such as 16GiB`},
		{"negative cpus", "machines:\n  - name: a\n    busy_watts: 1\n    cpus: -2\n", "m.yaml:4: machines[0].cpus: must not be negative"},
		{"too many gpus", "machines:\n  - name: a\n    busy_watts: 1\n    gpus: 5000\n", "m.yaml:4: machines[0].gpus: 5000 is over the limit"},
		{"bad label", "machines:\n  - name: a\n    busy_watts: 1\n    labels: [ok, \"two words\"]\n", `m.yaml:4: machines[0].labels[1]: "two words": want name or name=value`},
		{"duplicate label", "machines:\n  - name: a\n    busy_watts: 1\n    labels: [cuda=11, cuda=12]\n", `m.yaml:4: machines[0].labels[1]: label "cuda" declared twice`},
		{"opportunistic not a bool", "machines:\n  - name: a\n    busy_watts: 1\n    opportunistic: sometimes\n", `m.yaml:4: machines[0].opportunistic: want true or false`},
		{"reclaim_load without opportunistic", "machines:\n  - name: a\n    busy_watts: 1\n    reclaim_load: 0.5\n", `m.yaml:4: machines[0].reclaim_load: only an opportunistic machine is reclaimed on load`},
		{"reclaim_load zero", "machines:\n  - name: a\n    busy_watts: 1\n    opportunistic: true\n    reclaim_load: 0\n", `m.yaml:5: machines[0].reclaim_load: 0: want an owner load above 0`},
		{"reclaim_load huge", "machines:\n  - name: a\n    busy_watts: 1\n    opportunistic: true\n    reclaim_load: 100\n", `m.yaml:5: machines[0].reclaim_load: 100: want an owner load above 0 and at most 64`},
		{"reclaim_after without reclaim_load", "machines:\n  - name: a\n    busy_watts: 1\n    opportunistic: true\n    reclaim_after: 2m\n", `m.yaml:5: machines[0].reclaim_after: needs reclaim_load`},
		{"release_after too short", "machines:\n  - name: a\n    busy_watts: 1\n    opportunistic: true\n    reclaim_load: 0.5\n    release_after: 10ms\n", `m.yaml:6: machines[0].release_after: 10ms: want between 1s and 24h0m0s`},
		{"reclaim_after not a duration", "machines:\n  - name: a\n    busy_watts: 1\n    opportunistic: true\n    reclaim_load: 0.5\n    reclaim_after: soon\n", `m.yaml:6: machines[0].reclaim_after: want a duration`},
		{"bad org", "machines:\n  - {name: a, busy_watts: 1}\npolicy:\n  orgs: [uni-b, \"a/b\"]\n", `m.yaml:4: policy.orgs[1]: "a/b": want an organisation name`},
		{"host with a space", "machines:\n  - name: a\n    busy_watts: 1\n    host: \"node 1\"\n", `m.yaml:4: machines[0].host: "node 1": want a host name`},
		{"host a list", "machines:\n  - name: a\n    busy_watts: 1\n    host: [a, b]\n", `m.yaml:4: machines[0].host: want a value, got a list`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMachinesFile("m.yaml", []byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Errorf("%T is not a *FileError", err)
			}
		})
	}
}

// TestParseMachineResources: cpus, memory with units, gpus, labels and the
// organisations allowed are read as declared.
func TestParseMachineResources(t *testing.T) {
	const doc = `
machines:
  - name: big
    busy_watts: 300
    cpus: 8
    memory: 16GiB
    gpus: 2
    labels: [matlab, cuda=12.2]
    opportunistic: true
    reclaim_load: 0.75
    release_after: 10m
    host: big.example.org
  - name: small
    busy_watts: 30
    memory: 512000000
policy:
  allow: [sh]
  orgs: [uni-b, uni-c]
`
	f, err := ParseMachinesFile("m.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	big, small := f.Machines[0], f.Machines[1]
	if big.CPUs != 8 || big.MemoryBytes != 16<<30 || big.GPUs != 2 || !big.Opportunistic || small.Opportunistic || !reflect.DeepEqual(big.Labels, []string{"matlab", "cuda=12.2"}) {
		t.Errorf("big = %+v", big)
	}
	if big.ReclaimLoad != 0.75 || big.ReclaimAfter != 0 || big.ReleaseAfter != 10*time.Minute || small.ReclaimLoad != 0 {
		t.Errorf("reclaim keys of big = %v %v %v, small %v", big.ReclaimLoad, big.ReclaimAfter, big.ReleaseAfter, small.ReclaimLoad)
	}
	if big.HostName() != "big.example.org" || small.HostName() != "small" {
		t.Errorf("hosts %q, %q: want the declared one, else the name", big.HostName(), small.HostName())
	}
	if small.CPUs != 0 || small.MemoryBytes != 512_000_000 || small.Labels != nil {
		t.Errorf("small = %+v", small)
	}
	if !reflect.DeepEqual(f.Policy.Orgs, []string{"uni-b", "uni-c"}) {
		t.Errorf("orgs = %v", f.Policy.Orgs)
	}
}

func TestLoadMachinesFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "machines.yaml")
	if err := os.WriteFile(p, []byte("machines:\n  - name: a\n    busy_watts: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadMachinesFile(p)
	if want := p + ":3: machines[0].busy_watts: must not be negative, got -1"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	if _, err := LoadMachinesFile(filepath.Join(dir, "absent.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, maxMachinesFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadMachinesFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
}

func TestMeasureGFLOPS(t *testing.T) {
	g, err := MeasureGFLOPS(context.Background(), 50*time.Millisecond)
	// Any core of this century does between 0.01 and 1000 GFLOPS on this
	// loop; the bounds catch a unit error, not a slow machine.
	if err != nil || g < 0.01 || g > 1000 {
		t.Fatalf("MeasureGFLOPS = %v, %v", g, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := MeasureGFLOPS(ctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := MeasureGFLOPS(context.Background(), 0); err == nil {
		t.Error("zero duration: no error")
	}
}

func TestMeasureMissingGFLOPS(t *testing.T) {
	f, err := ParseMachinesFile("m.yaml", []byte("machines:\n  - {name: a, busy_watts: 1}\n  - {name: b, gflops: 7, busy_watts: 1}\n  - {name: c, busy_watts: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	filled, err := f.MeasureMissingGFLOPS(context.Background(), 20*time.Millisecond)
	if err != nil || !reflect.DeepEqual(filled, []string{"a", "c"}) {
		t.Fatalf("filled %v, %v", filled, err)
	}
	a, b, c := f.Machines[0], f.Machines[1], f.Machines[2]
	if a.GFLOPS <= 0 || a.GFLOPS != c.GFLOPS || b.GFLOPS != 7 || math.Abs(float64(a.MFLOPS())-a.GFLOPS*1000) > 1e-6 {
		t.Errorf("gflops %v %v %v", a.GFLOPS, b.GFLOPS, c.GFLOPS)
	}
	for _, m := range f.Machines {
		if err := m.Validate(); err != nil {
			t.Errorf("after measuring: %v", err)
		}
	}
}

func TestMatmulAdd(t *testing.T) {
	// [1 2; 3 4]·[5 6; 7 8] = [19 22; 43 50], added to C = [1 1; 1 1].
	c := []float64{1, 1, 1, 1}
	matmulAdd(c, []float64{1, 2, 3, 4}, []float64{5, 6, 7, 8}, 2)
	if want := []float64{20, 23, 44, 51}; !reflect.DeepEqual(c, want) {
		t.Errorf("got %v, want %v", c, want)
	}
}

func BenchmarkMeasureGFLOPS(b *testing.B) {
	for b.Loop() {
		g, err := MeasureGFLOPS(context.Background(), 100*time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(g, "GFLOPS")
	}
}
