package node

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

func TestConfigRoundTrip(t *testing.T) {
	c := DefaultConfig("uni-a")
	c.NewFederation = true
	c.Announce = []string{"/dns4/grid.example.org/tcp/9440"}
	c.Bootstrap = []string{"/ip4/10.0.0.1/tcp/9440/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"}
	c.Machines = "machines.yaml"
	c.Limit = "250.5W"
	c.Executor = ExecutorConfig{Kind: "sim", SimCompression: 12.5, StopGrace: 3 * time.Second}
	c.Heartbeat = HeartbeatConfig{Interval: time.Second, Timeout: 9 * time.Second}
	c.Consensus = ConsensusConfig{Preset: "wan", Policy: "hosep", ScheduleInterval: 2 * time.Second, CheckpointBlock: 0}
	c.Files = FilesConfig{MaxInputBytes: 1, MaxOutputBytes: 2, MaxLogBytes: 3, FetchTimeout: time.Minute}
	c.Checkpoint = CheckpointConfig{Replication: 3, Grace: 45 * time.Second, MaxArchiveBytes: 4, MaxTaskBytes: 5, MaxPeerBytes: 6,
		TransferTimeout: time.Minute, GCInterval: 7 * time.Second, Interval: 90 * time.Second}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseConfig("config.yaml", b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip:\n%+v\n%+v", back, c)
	}
	// Only org is required; everything else defaults.
	min, err := ParseConfig("config.yaml", []byte("org: x\n"))
	if err != nil || !reflect.DeepEqual(min, DefaultConfig("x")) {
		t.Fatalf("minimal config %+v %v", min, err)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"empty", "", "config.yaml: empty file"},
		{"syntax", "org: a\n  bad: [\n", "config.yaml:2:"},
		{"not a mapping", "- a\n", "config.yaml:1: want a mapping"},
		{"missing org", "api: 127.0.0.1:1\n", "config.yaml:1: org: missing"},
		{"bad org", "org: ../x\n", "config.yaml:1: org: \"../x\""},
		{"unknown key", "org: a\ncolour: red\n", "config.yaml:2: colour: unknown key"},
		{"duplicate key", "org: a\norg: b\n", "config.yaml:2: org: duplicate key"},
		{"alias", "org: &x a\napi: *x\n", "config.yaml:2: api: aliases are not supported"},
		{"listen not TCP", "org: a\nlisten: [/ip4/0.0.0.0/udp/9440/quic-v1]\n", "config.yaml:2: listen[0]: \"/ip4/0.0.0.0/udp/9440/quic-v1\": not a TCP address"},
		{"listen empty", "org: a\nlisten: []\n", "config.yaml:2: listen: empty list"},
		{"listen not a list", "org: a\nlisten: /ip4/1.2.3.4/tcp/1\n", "config.yaml:2: listen: want a list"},
		{"bootstrap without peer", "org: a\nbootstrap:\n  - /ip4/10.0.0.1/tcp/9440\n", "config.yaml:3: bootstrap[0]: address"},
		{"api without port", "org: a\napi: localhost\n", "config.yaml:2: api: \"localhost\": want HOST:PORT"},
		{"api bad port", "org: a\napi: localhost:99999\n", "config.yaml:2: api: \"localhost:99999\": port"},
		{"limit", "org: a\nlimit: lots\n", "config.yaml:2: limit: limit \"lots\""},
		{"limit negative", "org: a\nlimit: -5W\n", "config.yaml:2: limit: limit \"-5W\""},
		{"new_federation not bool", "org: a\nnew_federation: yes please\n", "config.yaml:2: new_federation: want true or false"},
		{"executor kind", "org: a\nexecutor:\n  kind: docker\n", "config.yaml:3: executor.kind: \"docker\": want process or sim"},
		{"compression zero", "org: a\nexecutor:\n  sim_compression: 0\n", "config.yaml:3: executor.sim_compression: must be positive"},
		{"compression NaN", "org: a\nexecutor:\n  sim_compression: .nan\n", "config.yaml:3: executor.sim_compression: want a finite number"},
		{"executor unknown key", "org: a\nexecutor:\n  gpu: true\n", "config.yaml:3: executor.gpu: unknown key"},
		{"grace not a duration", "org: a\nexecutor:\n  stop_grace: 10\n", "config.yaml:3: executor.stop_grace: want a duration"},
		{"heartbeat timeout", "org: a\nheartbeat:\n  timeout: soon\n", "config.yaml:3: heartbeat.timeout: want a duration"},
		{"heartbeat order", "org: a\nheartbeat:\n  interval: 5s\n  timeout: 5s\n", "config.yaml:3: heartbeat.timeout: 5s must exceed the interval 5s"},
		{"heartbeat zero", "org: a\nheartbeat:\n  interval: 0s\n", "config.yaml:3: heartbeat.interval: must be positive"},
		{"preset", "org: a\nconsensus:\n  preset: moon\n", "config.yaml:3: consensus.preset: \"moon\": want lan or wan"},
		{"policy", "org: a\nconsensus:\n  policy: fifo\n", "config.yaml:3: consensus.policy: \"fifo\": want one of"},
		{"negative block", "org: a\nconsensus:\n  checkpoint_block: -1m\n", "config.yaml:3: consensus.checkpoint_block: must not be negative"},
		{"log bytes too large", "org: a\nfiles:\n  max_log_bytes: 100000000\n", "config.yaml:3: files.max_log_bytes: 100000000 out of range"},
		{"input bytes zero", "org: a\nfiles:\n  max_input_bytes: 0\n", "config.yaml:3: files.max_input_bytes: 0 out of range"},
		{"input bytes text", "org: a\nfiles:\n  max_input_bytes: big\n", "config.yaml:3: files.max_input_bytes: want a whole number"},
		{"replication zero", "org: a\ncheckpoint:\n  replication: 0\n", "config.yaml:3: checkpoint.replication: 0 out of range [1, 16]"},
		{"replication too high", "org: a\ncheckpoint:\n  replication: 17\n", "config.yaml:3: checkpoint.replication: 17 out of range [1, 16]"},
		{"checkpoint grace", "org: a\ncheckpoint:\n  grace: -1s\n", "config.yaml:3: checkpoint.grace: must not be negative"},
		{"archive bytes zero", "org: a\ncheckpoint:\n  max_archive_bytes: 0\n", "config.yaml:3: checkpoint.max_archive_bytes: 0 out of range"},
		{"peer bytes text", "org: a\ncheckpoint:\n  max_peer_bytes: 16GiB\n", "config.yaml:3: checkpoint.max_peer_bytes: want a whole number"},
		{"transfer timeout zero", "org: a\ncheckpoint:\n  transfer_timeout: 0s\n", "config.yaml:3: checkpoint.transfer_timeout: must be positive"},
		{"gc interval zero", "org: a\ncheckpoint:\n  gc_interval: 0s\n", "config.yaml:3: checkpoint.gc_interval: must be positive"},
		{"checkpoint unknown key", "org: a\ncheckpoint:\n  copies: 2\n", "config.yaml:3: checkpoint.copies: unknown key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("config.yaml", []byte(tc.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to start with %q", err, tc.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("%T is not a *ConfigError", err)
			}
		})
	}
}

func TestParseLimit(t *testing.T) {
	cases := []struct {
		in      string
		quotaMW int64
		want    int64
		bad     bool
	}{
		{in: "100%", quotaMW: 250_000, want: 250_000},
		{in: "80%", quotaMW: 250_000, want: 200_000},
		{in: "0%", quotaMW: 250_000, want: 0},
		{in: "250W", want: 250_000},
		{in: "250.5 W", want: 250_500},
		{in: "system", quotaMW: 1, want: ledger.MaxLimitMilliW},
		{in: "80", bad: true},
		{in: "-1%", bad: true},
		{in: "NaN%", bad: true},
		{in: "1e300W", bad: true},
	}
	for _, tc := range cases {
		l, err := ParseLimit(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseLimit(%q) accepted", tc.in)
			}
			continue
		}
		if err != nil || l.MilliWatts(tc.quotaMW) != tc.want {
			t.Errorf("ParseLimit(%q) = %+v (%v) → %d mW, want %d", tc.in, l, err, l.MilliWatts(tc.quotaMW), tc.want)
		}
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInit(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	machines := writeFile(t, src, "m.yaml", "machines:\n  - name: fast\n    gflops: 50\n    busy_watts: 120\n    idle_watts: 20\n  - name: measured\n    busy_watts: 80\npolicy:\n  allow: [/bin/sh, python3]\n  kill_grace: 3s\n  max_output_files: 7\n")
	dir := filepath.Join(t.TempDir(), "peer-a")
	res, err := Init(ctx, InitOptions{DataDir: dir, Org: "uni-a", MachinesFile: machines, NewFederation: true, MeasureFor: 20 * time.Millisecond, API: "127.0.0.1:9500"})
	if err != nil {
		t.Fatal(err)
	}
	if res.PeerID == "" || !res.NewFederation || len(res.Machines) != 2 {
		t.Fatalf("result %+v", res)
	}
	if m := res.Machines[1]; m.Name != "measured" || !m.Measured || m.GFLOPS <= 0 || res.Machines[0].Measured || res.Machines[0].GFLOPS != 50 {
		t.Fatalf("machines %+v", res.Machines)
	}
	for _, f := range []string{"identity.key", "federation.key", TokenFile, ConfigFile, MachinesFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", f, fi.Mode().Perm())
		}
	}
	cfg, err := LoadConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Org != "uni-a" || !cfg.NewFederation || cfg.API != "127.0.0.1:9500" || cfg.Machines != MachinesFile {
		t.Fatalf("config %+v", cfg)
	}
	tok, _ := os.ReadFile(res.TokenFile)
	if len(strings.TrimSpace(string(tok))) != 64 {
		t.Fatalf("token %q", tok)
	}
	// The machines file written back keeps the policy and the measured
	// figure.
	written, err := os.ReadFile(res.MachinesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(written, []byte("kill_grace: 3s")) || !bytes.Contains(written, []byte("- python3")) || bytes.Count(written, []byte("gflops:")) != 2 {
		t.Fatalf("machines file:\n%s", written)
	}

	t.Run("refuses an initialised directory", func(t *testing.T) {
		before, _ := os.ReadFile(filepath.Join(dir, "identity.key"))
		_, err := Init(ctx, InitOptions{DataDir: dir, Org: "uni-z", NewFederation: true})
		if !errors.Is(err, ErrInitialised) {
			t.Fatalf("second init: %v", err)
		}
		after, _ := os.ReadFile(filepath.Join(dir, "identity.key"))
		if !bytes.Equal(before, after) {
			t.Fatal("the identity changed")
		}
	})

	t.Run("copies a given secret", func(t *testing.T) {
		dir2 := filepath.Join(t.TempDir(), "peer-b")
		res2, err := Init(ctx, InitOptions{DataDir: dir2, Org: "uni-b", SecretFile: res.SecretFile})
		if err != nil {
			t.Fatal(err)
		}
		a, err := p2p.LoadSecretFile(res.SecretFile)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p2p.LoadSecretFile(res2.SecretFile)
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("secret not copied: %v", err)
		}
		if res2.PeerID == res.PeerID || res2.NewFederation || res2.MachinesFile != "" {
			t.Fatalf("result %+v", res2)
		}
	})

	bad := []struct {
		name string
		o    InitOptions
		want string
	}{
		{"neither", InitOptions{Org: "x"}, "exactly one of"},
		{"both", InitOptions{Org: "x", NewFederation: true, SecretFile: res.SecretFile}, "exactly one of"},
		{"bad org", InitOptions{Org: "a/b", NewFederation: true}, "organisation \"a/b\""},
		{"missing secret", InitOptions{Org: "x", SecretFile: filepath.Join(src, "nope")}, "federation secret"},
		{"not a secret", InitOptions{Org: "x", SecretFile: machines}, "not a PSK v1 file"},
		{"bad machines", InitOptions{Org: "x", NewFederation: true, MachinesFile: writeFile(t, src, "bad.yaml", "machines:\n  - name: m\n    busy_watts: -3\n")}, "bad.yaml:3: machines[0].busy_watts"},
		{"missing machines", InitOptions{Org: "x", NewFederation: true, MachinesFile: filepath.Join(src, "none.yaml")}, "machines file"},
		{"bad listen", InitOptions{Org: "x", NewFederation: true, Listen: []string{"/ip4/1.2.3.4/udp/1"}}, "listen[0]"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.DataDir = filepath.Join(t.TempDir(), "new")
			_, err := Init(ctx, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(tc.o.DataDir); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a failed init left %s behind (%v)", tc.o.DataDir, err)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, Options{DataDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "peer init") {
		t.Fatalf("start of an empty directory: %v", err)
	}
	tn := newTNode(t, "s-a", "", "", testConfig("sim"))
	if _, err := Start(ctx, Options{DataDir: tn.dir, Bootstrap: []string{"/ip4/1.2.3.4/tcp/1"}}); err == nil || !strings.HasPrefix(err.Error(), "--bootstrap") {
		t.Fatalf("a bootstrap address without /p2p/: %v", err)
	}
	if _, err := Start(ctx, Options{DataDir: tn.dir, Listen: []string{"/ip4/1.2.3.4/udp/1"}}); err == nil || !strings.HasPrefix(err.Error(), "--listen") {
		t.Fatalf("a UDP listen address: %v", err)
	}
	if err := os.WriteFile(filepath.Join(tn.dir, ConfigFile), []byte("org: s-a\nheartbeat:\n  timeout: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(ctx, Options{DataDir: tn.dir})
	if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(tn.dir, ConfigFile)+":3: heartbeat.timeout:") {
		t.Fatalf("start with a bad config: %v", err)
	}
}

// TestExampleMachinesFiles: the machines files of examples/machines parse.
func TestExampleMachinesFiles(t *testing.T) {
	files, err := filepath.Glob("../examples/machines/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example machines files (%v)", err)
	}
	for _, f := range files {
		mf, err := executor.LoadMachinesFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := encodeMachinesFile(mf); err != nil {
			t.Errorf("%s does not survive peer init's rewrite: %v", f, err)
		}
	}
}
