package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

func TestConfigRoundTrip(t *testing.T) {
	c := Default("uni-a")
	c.NewFederation = true
	c.Announce = []string{"/dns4/grid.example.org/tcp/9440"}
	c.Bootstrap = []string{"/ip4/10.0.0.1/tcp/9440/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"}
	c.Machines = "machines.yaml"
	c.Limit = "250.5W"
	c.Executor = ExecutorConfig{Kind: "sim", SimCompression: 12.5, StopGrace: 3 * time.Second}
	c.Heartbeat = HeartbeatConfig{Interval: time.Second, Timeout: 9 * time.Second}
	c.Consensus = ConsensusConfig{Preset: "wan", Policy: "hosep", ScheduleInterval: 2 * time.Second, CheckpointBlock: 0, DeadVoterAfter: 45 * time.Second, RemoveDeadAfter: 72 * time.Hour}
	c.Files = FilesConfig{MaxInputBytes: 1, MaxOutputBytes: 2, MaxLogBytes: 3, FetchTimeout: time.Minute}
	c.Checkpoint = CheckpointConfig{Replication: 3, Grace: 45 * time.Second, MaxArchiveBytes: 4, MaxTaskBytes: 5, MaxPeerBytes: 6,
		TransferTimeout: time.Minute, GCInterval: 7 * time.Second, Interval: 90 * time.Second}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("config.yaml", b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip:\n%+v\n%+v", back, c)
	}
	// Only org is required; everything else defaults.
	min, err := Parse("config.yaml", []byte("org: x\n"))
	if err != nil || !reflect.DeepEqual(min, Default("x")) {
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
		{"executor kind", "org: a\nexecutor:\n  kind: docker\n", "config.yaml:3: executor.kind: \"docker\": want process, sim or slurm"},
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
		{"remove dead too soon", "org: a\nconsensus:\n  remove_dead_after: 30s\n", "config.yaml:3: consensus.remove_dead_after: 30s: want 0s (never) or at least 1m0s"},
		{"remove dead before demotion", "org: a\nconsensus:\n  preset: wan\n  remove_dead_after: 90s\n", "config.yaml:3: consensus.remove_dead_after: 1m30s must exceed dead_voter_after (2m0s)"},
		{"dead voter too soon", "org: a\nconsensus:\n  dead_voter_after: 1s\n", "config.yaml:3: consensus.dead_voter_after: 1s: want at least 5s"},
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
		{"retention negative", "org: a\nretention:\n  blobs: -1h\n", "config.yaml:3: retention.blobs: must not be negative"},
		{"retention not a duration", "org: a\nretention:\n  outputs: 30\n", "config.yaml:3: retention.outputs: want a duration"},
		{"retention interval zero", "org: a\nretention:\n  interval: 0s\n", "config.yaml:3: retention.interval: must be positive"},
		{"retention unknown key", "org: a\nretention:\n  logs: 1h\n", "config.yaml:3: retention.logs: unknown key (want outputs, blobs, tasks, interval)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("config.yaml", []byte(tc.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to start with %q", err, tc.want)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("%T is not a *Error", err)
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
