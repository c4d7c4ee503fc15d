// Package config is a peer's data directory: its layout, its configuration
// file (config.yaml, docs/CONFIG.md), its creation by `peer init` (Init) and
// the boot stamp recorded at every start (NextBoot).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/internal/yamlfile"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/coopgrid/coopgrid/policy"
	ma "github.com/multiformats/go-multiaddr"
	"gopkg.in/yaml.v3"
)

// Config is DATA/config.yaml. docs/CONFIG.md documents every key; the flags
// of `peer run` override Listen, API and Bootstrap.
type Config struct {
	// Org is the organisation this peer acts for. Required.
	Org string
	// NewFederation is set by `peer init --new-federation`: only such a
	// peer, with no Raft state, no bootstrap address and no known peers,
	// starts a new one-member federation. Every other start joins.
	NewFederation bool
	// Listen are TCP multiaddrs (default /ip4/0.0.0.0/tcp/9440).
	Listen []string
	// Announce, when set, replace the addresses advertised to others.
	Announce []string
	// API is the HTTP API's host:port (default 127.0.0.1:9441).
	API string
	// Bootstrap are multiaddrs ending in /p2p/<peer id> of members to join
	// through, when this peer is not a member yet.
	Bootstrap []string
	// Machines is the machines file, relative to the data directory unless
	// absolute; "" means this peer offers no machines (it only submits).
	Machines string
	// Limit is the power limit the organisation registers with: "100%" (of
	// its machines' busy power, the default), "250W", or "system".
	Limit string

	Executor   ExecutorConfig
	Heartbeat  HeartbeatConfig
	Consensus  ConsensusConfig
	Files      FilesConfig
	Checkpoint CheckpointConfig
	Retention  RetentionConfig
}

// RetentionConfig says how long this peer keeps the files of finished
// tasks in its data directory (docs/CONFIG.md, "Retention"). 0 keeps them
// for good. Nothing a task that is not finished needs is ever removed, nor
// outputs this peer could not deliver.
type RetentionConfig struct {
	// Outputs: outputs/<task-id>/, the outputs returned for this
	// organisation's tasks, once the task ended this long ago (default 0:
	// kept; they are the users' results).
	Outputs time.Duration
	// Blobs: blobs/<sha256>, input files, once unchanged this long and
	// named by no unfinished task (default 720h).
	Blobs time.Duration
	// Tasks: tasks/<task-id>/, the executor's attempt directories, logs
	// and outputs' staging, once the task ended this long ago (default
	// 168h).
	Tasks time.Duration
	// Interval between two sweeps (default 1h); the first runs once the
	// peer is ready.
	Interval time.Duration
}

// ExecutorConfig chooses how tasks run on this peer's machines.
type ExecutorConfig struct {
	// Kind is "process" (real processes, the default), "sim", or "slurm"
	// (each task a job of the institution's Slurm cluster, whose nodes
	// are the machines: the machines file's slurm section, docs/SLURM.md).
	Kind string
	// SimCompression is simulated seconds per real second for "sim"
	// (default 600).
	SimCompression float64
	// StopGrace is the time between SIGTERM and SIGKILL when the ledger
	// preempts or cancels a task (default 10s).
	StopGrace time.Duration
}

// HeartbeatConfig paces the gossip heartbeats and the leader's detection of
// silent machines.
type HeartbeatConfig struct {
	// Interval between two heartbeats of this peer's machines (default 2s).
	Interval time.Duration
	// Timeout after which the leader declares a silent machine lost
	// (default 15s). It must exceed Interval.
	Timeout time.Duration
}

// ConsensusConfig tunes Raft and the leader's scheduler.
type ConsensusConfig struct {
	// Preset is "lan" (default) or "wan": the Raft timeouts of
	// consensus.Default or consensus.WANConfig.
	Preset string
	// Policy is the scheduling policy the leader runs (default ehosep).
	Policy string
	// ScheduleInterval is the leader's periodic scheduling tick (default 5s).
	ScheduleInterval time.Duration
	// CheckpointBlock is the policy's checkpoint block (default 5m; 0
	// means tasks are not checkpointed).
	CheckpointBlock time.Duration
	// DeadVoterAfter: a voter the leader has not heard from for this long
	// is demoted to non-voter and a healthy non-voter promoted (0: the
	// preset's, 30s lan, 2m wan; at least MinDeadVoterAfter).
	DeadVoterAfter time.Duration
	// RemoveDeadAfter: a non-voter (a demoted dead voter included) the
	// leader has not heard from for this long is taken out of the Raft
	// configuration (0: never, the default; else at least
	// MinRemoveDeadAfter and more than DeadVoterAfter).
	RemoveDeadAfter time.Duration
	// RetentionAfter and RetentionKeep are the retention rule a new
	// federation's first peer registers (ledger.Retention, docs/HISTORY.md):
	// a finished task leaves the replicated state RetentionAfter after it
	// ended (default 168h), or while more than RetentionKeep finished tasks
	// remain (default 0: no count rule). Both 0: every task is kept.
	RetentionAfter time.Duration
	RetentionKeep  int64
}

// MinDeadVoterAfter bounds consensus.dead_voter_after from below: a voter
// restarting, or a leader's first autopilot rounds, must not demote it.
const MinDeadVoterAfter = 5 * time.Second

// deadVoterAfter is DeadVoterAfter, or the preset's.
func (c ConsensusConfig) deadVoterAfter() time.Duration {
	switch {
	case c.DeadVoterAfter > 0:
		return c.DeadVoterAfter
	case c.Preset == "wan":
		return 2 * time.Minute
	}
	return 30 * time.Second
}

// MinRemoveDeadAfter bounds consensus.remove_dead_after from below: the
// leader asks a hundred non-voters for their stats in 20 s, and a peer
// restarting must not be taken out.
const MinRemoveDeadAfter = time.Minute

// FilesConfig bounds the files that travel between peers.
type FilesConfig struct {
	// MaxInputBytes bounds the inputs of one task (default 64 MiB).
	MaxInputBytes int64
	// MaxOutputBytes bounds the outputs of one task this peer accepts
	// (default 1 GiB).
	MaxOutputBytes int64
	// MaxLogBytes bounds a task's stdout or stderr served to others
	// (default 1 MiB).
	MaxLogBytes int64
	// FetchTimeout is how long the executing peer keeps trying to fetch a
	// task's inputs before it fails the task (default 60s).
	FetchTimeout time.Duration
}

// CheckpointConfig sets how this peer takes, keeps, replicates and restores
// the checkpoints of checkpointable tasks (docs/CHECKPOINTS.md).
type CheckpointConfig struct {
	// Replication is the number of peers that hold each archive this peer
	// takes, itself included (default 2; 1 to 16).
	Replication int
	// Grace is the time between SIGTERM and SIGKILL for a checkpointable
	// task that the ledger preempts or cancels: the time it has to write
	// its final checkpoint (default 30s). Other tasks get
	// executor.stop_grace.
	Grace time.Duration
	// MaxArchiveBytes bounds one compressed archive, taken or received
	// (default 1 GiB).
	MaxArchiveBytes int64
	// MaxTaskBytes bounds the archives of one task in this peer's store
	// (default 2 GiB).
	MaxTaskBytes int64
	// MaxPeerBytes bounds every archive in this peer's store (default
	// 16 GiB).
	MaxPeerBytes int64
	// TransferTimeout bounds one push or fetch of an archive (default 10m).
	TransferTimeout time.Duration
	// GCInterval paces the collection of archives no unfinished task needs
	// (default 1m; it also runs at start and after this peer's tasks end).
	GCInterval time.Duration
	// Interval, when positive, makes this peer also checkpoint its running
	// checkpointable tasks every Interval (the ledger's checkpoint
	// command). 0, the default, checkpoints only at a preemption.
	Interval time.Duration
}

// Defaults.
const (
	DefaultListen           = p2p.DefaultListenAddr
	DefaultAPI              = api.DefaultAddr
	DefaultLimit            = "100%"
	DefaultExecutor         = "process"
	DefaultSimCompression   = 600
	DefaultStopGrace        = 10 * time.Second
	DefaultHeartbeat        = 2 * time.Second
	DefaultHeartbeatTimeout = 15 * time.Second
	DefaultPreset           = "lan"
	DefaultPolicy           = "ehosep"
	DefaultScheduleInterval = 5 * time.Second
	DefaultCheckpointBlock  = 5 * time.Minute
	DefaultRetentionAfter   = 7 * 24 * time.Hour
	// MaxRetentionKeep bounds consensus.retention_keep (the ledger's bound).
	MaxRetentionKeep      = 10_000_000
	DefaultMaxInputBytes  = 64 << 20
	DefaultMaxOutputBytes = 1 << 30
	DefaultMaxLogBytes    = 1 << 20
	DefaultFetchTimeout   = 60 * time.Second

	DefaultCheckpointReplication = 2
	DefaultCheckpointGrace       = 30 * time.Second
	DefaultCheckpointArchive     = 1 << 30
	DefaultCheckpointTaskBytes   = 2 << 30
	DefaultCheckpointPeerBytes   = 16 << 30
	DefaultCheckpointTransfer    = 10 * time.Minute
	DefaultCheckpointGCInterval  = time.Minute
	maxCheckpointReplication     = 16

	DefaultRetainBlobs       = 30 * 24 * time.Hour
	DefaultRetainTasks       = 7 * 24 * time.Hour
	DefaultRetentionInterval = time.Hour
)

// Hard bounds on configurable sizes: a frame of the file protocols carries
// at most one chunk, and logs travel in one frame.
const (
	maxConfigBytes   = 1 << 20
	maxLogBytesLimit = 3 << 20
)

// Default returns the defaults for org.
func Default(org string) Config {
	return Config{
		Org:    org,
		Listen: []string{DefaultListen},
		API:    DefaultAPI,
		Limit:  DefaultLimit,
		Executor: ExecutorConfig{
			Kind:           DefaultExecutor,
			SimCompression: DefaultSimCompression,
			StopGrace:      DefaultStopGrace,
		},
		Heartbeat: HeartbeatConfig{Interval: DefaultHeartbeat, Timeout: DefaultHeartbeatTimeout},
		Consensus: ConsensusConfig{
			Preset:           DefaultPreset,
			Policy:           DefaultPolicy,
			ScheduleInterval: DefaultScheduleInterval,
			CheckpointBlock:  DefaultCheckpointBlock,
			RetentionAfter:   DefaultRetentionAfter,
		},
		Files: FilesConfig{
			MaxInputBytes:  DefaultMaxInputBytes,
			MaxOutputBytes: DefaultMaxOutputBytes,
			MaxLogBytes:    DefaultMaxLogBytes,
			FetchTimeout:   DefaultFetchTimeout,
		},
		Checkpoint: CheckpointConfig{
			Replication:     DefaultCheckpointReplication,
			Grace:           DefaultCheckpointGrace,
			MaxArchiveBytes: DefaultCheckpointArchive,
			MaxTaskBytes:    DefaultCheckpointTaskBytes,
			MaxPeerBytes:    DefaultCheckpointPeerBytes,
			TransferTimeout: DefaultCheckpointTransfer,
			GCInterval:      DefaultCheckpointGCInterval,
		},
		Retention: RetentionConfig{
			Blobs:    DefaultRetainBlobs,
			Tasks:    DefaultRetainTasks,
			Interval: DefaultRetentionInterval,
		},
	}
}

// Error is an error at a position of the config file.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Load reads and checks a config file.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse checks a config file's content; name is used in errors. It is
// strict: unknown or duplicate keys, aliases, values of the wrong type or
// out of range are errors naming the file, the line and the field. Keys
// left out take their defaults; org is required.
func Parse(name string, data []byte) (Config, error) {
	if len(data) > maxConfigBytes {
		return Config{}, &Error{File: name, Msg: fmt.Sprintf("larger than %d bytes", maxConfigBytes)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := yamlfile.SyntaxErrorLine(err)
		return Config{}, &Error{File: name, Line: line, Msg: msg}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return Config{}, &Error{File: name, Msg: "empty file: want a mapping with at least org"}
	}
	p := newParser(name)
	c := Default("")
	root := doc.Content[0]
	sawOrg := false
	err := p.Mapping(root, "", func(key string, k, v *yaml.Node, f string) error {
		var err error
		switch key {
		case "org":
			sawOrg = true
			if c.Org, err = p.Str(v, f); err == nil && !ValidName(c.Org) {
				err = p.Errf(v, f, "%q: want 1-%d characters of [A-Za-z0-9._-] starting with a letter or digit", c.Org, ledger.MaxNameLen)
			}
		case "new_federation":
			c.NewFederation, err = p.boolean(v, f)
		case "listen":
			if c.Listen, err = p.strList(v, f, CheckTCPAddr); err == nil && len(c.Listen) == 0 {
				err = p.Errf(v, f, "empty list: want at least one address")
			}
		case "announce":
			c.Announce, err = p.strList(v, f, CheckTCPAddr)
		case "api":
			if c.API, err = p.Str(v, f); err == nil {
				if cerr := CheckAPIAddr(c.API); cerr != nil {
					err = p.Errf(v, f, "%v", cerr)
				}
			}
		case "bootstrap":
			c.Bootstrap, err = p.strList(v, f, CheckBootstrapAddr)
		case "machines":
			c.Machines, err = p.strOrEmpty(v, f)
		case "limit":
			if c.Limit, err = p.Str(v, f); err == nil {
				if _, lerr := ParseLimit(c.Limit); lerr != nil {
					err = p.Errf(v, f, "%v", lerr)
				}
			}
		case "executor":
			err = p.Mapping(v, f, func(key string, k, v *yaml.Node, f string) error {
				var err error
				switch key {
				case "kind":
					if c.Executor.Kind, err = p.Str(v, f); err == nil && c.Executor.Kind != "process" && c.Executor.Kind != "sim" && c.Executor.Kind != "slurm" {
						err = p.Errf(v, f, "%q: want process, sim or slurm", c.Executor.Kind)
					}
				case "sim_compression":
					if c.Executor.SimCompression, err = p.number(v, f); err == nil && c.Executor.SimCompression <= 0 {
						err = p.Errf(v, f, "must be positive, got %s", v.Value)
					}
				case "stop_grace":
					c.Executor.StopGrace, err = p.duration(v, f)
				default:
					return p.Errf(k, f, "unknown key (want kind, sim_compression, stop_grace)")
				}
				return err
			})
		case "heartbeat":
			err = p.Mapping(v, f, func(key string, k, v *yaml.Node, f string) error {
				var err error
				switch key {
				case "interval":
					if c.Heartbeat.Interval, err = p.duration(v, f); err == nil && c.Heartbeat.Interval <= 0 {
						err = p.Errf(v, f, "must be positive")
					}
				case "timeout":
					if c.Heartbeat.Timeout, err = p.duration(v, f); err == nil && c.Heartbeat.Timeout <= 0 {
						err = p.Errf(v, f, "must be positive")
					}
				default:
					return p.Errf(k, f, "unknown key (want interval, timeout)")
				}
				return err
			})
			if err == nil && c.Heartbeat.Timeout <= c.Heartbeat.Interval {
				err = p.Errf(v, f+".timeout", "%v must exceed the interval %v", c.Heartbeat.Timeout, c.Heartbeat.Interval)
			}
		case "consensus":
			err = p.Mapping(v, f, func(key string, k, v *yaml.Node, f string) error {
				var err error
				switch key {
				case "preset":
					if c.Consensus.Preset, err = p.Str(v, f); err == nil && c.Consensus.Preset != "lan" && c.Consensus.Preset != "wan" {
						err = p.Errf(v, f, "%q: want lan or wan", c.Consensus.Preset)
					}
				case "policy":
					if c.Consensus.Policy, err = p.Str(v, f); err == nil {
						if _, perr := policy.New(c.Consensus.Policy); perr != nil {
							err = p.Errf(v, f, "%q: want one of %s", c.Consensus.Policy, strings.Join(policy.Names(), ", "))
						}
					}
				case "schedule_interval":
					if c.Consensus.ScheduleInterval, err = p.duration(v, f); err == nil && c.Consensus.ScheduleInterval <= 0 {
						err = p.Errf(v, f, "must be positive")
					}
				case "checkpoint_block":
					c.Consensus.CheckpointBlock, err = p.duration(v, f)
				case "dead_voter_after":
					if c.Consensus.DeadVoterAfter, err = p.duration(v, f); err == nil && c.Consensus.DeadVoterAfter < MinDeadVoterAfter {
						err = p.Errf(v, f, "%v: want at least %v", c.Consensus.DeadVoterAfter, MinDeadVoterAfter)
					}
				case "remove_dead_after":
					if c.Consensus.RemoveDeadAfter, err = p.duration(v, f); err == nil && c.Consensus.RemoveDeadAfter != 0 && c.Consensus.RemoveDeadAfter < MinRemoveDeadAfter {
						err = p.Errf(v, f, "%v: want 0s (never) or at least %v", c.Consensus.RemoveDeadAfter, MinRemoveDeadAfter)
					}
				case "retention_after":
					c.Consensus.RetentionAfter, err = p.duration(v, f)
				case "retention_keep":
					var x float64
					if x, err = p.number(v, f); err == nil && (x != math.Trunc(x) || x < 0 || x > MaxRetentionKeep) {
						err = p.Errf(v, f, "%s: want a whole number from 0 to %d", v.Value, MaxRetentionKeep)
					}
					c.Consensus.RetentionKeep = int64(x)
				default:
					return p.Errf(k, f, "unknown key (want preset, policy, schedule_interval, checkpoint_block, dead_voter_after, remove_dead_after, retention_after, retention_keep)")
				}
				return err
			})
			if dead := c.Consensus.deadVoterAfter(); err == nil && c.Consensus.RemoveDeadAfter != 0 && c.Consensus.RemoveDeadAfter <= dead {
				err = p.Errf(v, f+".remove_dead_after", "%v must exceed dead_voter_after (%v): a dead voter is demoted first", c.Consensus.RemoveDeadAfter, dead)
			}
		case "files":
			err = p.Mapping(v, f, func(key string, k, v *yaml.Node, f string) error {
				var err error
				switch key {
				case "max_input_bytes":
					c.Files.MaxInputBytes, err = p.size(v, f, 1, math.MaxInt64)
				case "max_output_bytes":
					c.Files.MaxOutputBytes, err = p.size(v, f, 1, math.MaxInt64)
				case "max_log_bytes":
					c.Files.MaxLogBytes, err = p.size(v, f, 1, maxLogBytesLimit)
				case "fetch_timeout":
					if c.Files.FetchTimeout, err = p.duration(v, f); err == nil && c.Files.FetchTimeout <= 0 {
						err = p.Errf(v, f, "must be positive")
					}
				default:
					return p.Errf(k, f, "unknown key (want max_input_bytes, max_output_bytes, max_log_bytes, fetch_timeout)")
				}
				return err
			})
		case "checkpoint":
			err = p.Mapping(v, f, func(key string, k, v *yaml.Node, f string) error {
				var err error
				ck := &c.Checkpoint
				positive := func(d time.Duration, err error) (time.Duration, error) {
					if err == nil && d <= 0 {
						err = p.Errf(v, f, "must be positive")
					}
					return d, err
				}
				switch key {
				case "replication":
					var n int64
					if n, err = p.size(v, f, 1, maxCheckpointReplication); err == nil {
						ck.Replication = int(n)
					}
				case "grace":
					ck.Grace, err = p.duration(v, f)
				case "max_archive_bytes":
					ck.MaxArchiveBytes, err = p.size(v, f, 1, math.MaxInt64)
				case "max_task_bytes":
					ck.MaxTaskBytes, err = p.size(v, f, 1, math.MaxInt64)
				case "max_peer_bytes":
					ck.MaxPeerBytes, err = p.size(v, f, 1, math.MaxInt64)
				case "transfer_timeout":
					ck.TransferTimeout, err = positive(p.duration(v, f))
				case "gc_interval":
					ck.GCInterval, err = positive(p.duration(v, f))
				case "interval":
					ck.Interval, err = p.duration(v, f)
				default:
					return p.Errf(k, f, "unknown key (want replication, grace, max_archive_bytes, max_task_bytes, max_peer_bytes, transfer_timeout, gc_interval, interval)")
				}
				return err
			})
		case "retention":
			err = p.Mapping(v, f, func(key string, k, v *yaml.Node, f string) error {
				var err error
				r := &c.Retention
				kept := func(d time.Duration, err error) (time.Duration, error) {
					if err == nil && d < 0 {
						err = p.Errf(v, f, "must not be negative (0 keeps the files for good)")
					}
					return d, err
				}
				switch key {
				case "outputs":
					r.Outputs, err = kept(p.duration(v, f))
				case "blobs":
					r.Blobs, err = kept(p.duration(v, f))
				case "tasks":
					r.Tasks, err = kept(p.duration(v, f))
				case "interval":
					if r.Interval, err = p.duration(v, f); err == nil && r.Interval <= 0 {
						err = p.Errf(v, f, "must be positive")
					}
				default:
					return p.Errf(k, f, "unknown key (want outputs, blobs, tasks, interval)")
				}
				return err
			})
		default:
			return p.Errf(k, f, "unknown key")
		}
		return err
	})
	if err != nil {
		return Config{}, err
	}
	if !sawOrg {
		return Config{}, p.Errf(root, "org", "missing")
	}
	return c, nil
}

// Validate checks a Config built in code (Parse checks as it reads).
func (c Config) Validate() error {
	b, err := c.Marshal()
	if err != nil {
		return err
	}
	_, err = Parse("config", b)
	return err
}

// Marshal writes the config as YAML with every key, commented; Parse
// reads it back to the same Config.
func (c Config) Marshal() ([]byte, error) {
	var b bytes.Buffer
	q := func(s string) string {
		out, err := yaml.Marshal(s)
		if err != nil {
			return strconv.Quote(s)
		}
		return strings.TrimSuffix(string(out), "\n")
	}
	list := func(ss []string) string {
		if len(ss) == 0 {
			return " []\n"
		}
		var l strings.Builder
		l.WriteString("\n")
		for _, s := range ss {
			l.WriteString("  - " + q(s) + "\n")
		}
		return l.String()
	}
	fmt.Fprintf(&b, "# coopgrid peer configuration: docs/CONFIG.md describes every key.\n")
	fmt.Fprintf(&b, "# The flags of `peer run` (--listen, --api, --bootstrap) override these keys.\n")
	fmt.Fprintf(&b, "org: %s\n", q(c.Org))
	fmt.Fprintf(&b, "# Only the peer that created the federation has true here.\n")
	fmt.Fprintf(&b, "new_federation: %t\n", c.NewFederation)
	fmt.Fprintf(&b, "listen:%s", list(c.Listen))
	fmt.Fprintf(&b, "announce:%s", list(c.Announce))
	fmt.Fprintf(&b, "api: %s\n", q(c.API))
	fmt.Fprintf(&b, "bootstrap:%s", list(c.Bootstrap))
	fmt.Fprintf(&b, "# Relative to the data directory; empty: this peer offers no machines.\n")
	fmt.Fprintf(&b, "machines: %s\n", q(c.Machines))
	fmt.Fprintf(&b, "# Power limit registered with the organisation: 100%%, 250W or system.\n")
	fmt.Fprintf(&b, "limit: %s\n", q(c.Limit))
	fmt.Fprintf(&b, "executor:\n  kind: %s\n  sim_compression: %s\n  stop_grace: %s\n",
		q(c.Executor.Kind), strconv.FormatFloat(c.Executor.SimCompression, 'g', -1, 64), c.Executor.StopGrace)
	fmt.Fprintf(&b, "heartbeat:\n  interval: %s\n  timeout: %s\n", c.Heartbeat.Interval, c.Heartbeat.Timeout)
	fmt.Fprintf(&b, "consensus:\n  preset: %s\n  policy: %s\n  schedule_interval: %s\n  checkpoint_block: %s\n",
		q(c.Consensus.Preset), q(c.Consensus.Policy), c.Consensus.ScheduleInterval, c.Consensus.CheckpointBlock)
	if c.Consensus.DeadVoterAfter > 0 {
		fmt.Fprintf(&b, "  dead_voter_after: %s\n", c.Consensus.DeadVoterAfter)
	}
	if c.Consensus.RemoveDeadAfter > 0 {
		fmt.Fprintf(&b, "  remove_dead_after: %s\n", c.Consensus.RemoveDeadAfter)
	}
	fmt.Fprintf(&b, "  # Finished tasks leave the replicated state (a new federation's first peer\n  # sets the rule; docs/HISTORY.md): after this long, or beyond this many.\n  retention_after: %s\n  retention_keep: %d\n",
		c.Consensus.RetentionAfter, c.Consensus.RetentionKeep)
	fmt.Fprintf(&b, "files:\n  max_input_bytes: %d\n  max_output_bytes: %d\n  max_log_bytes: %d\n  fetch_timeout: %s\n",
		c.Files.MaxInputBytes, c.Files.MaxOutputBytes, c.Files.MaxLogBytes, c.Files.FetchTimeout)
	ck := c.Checkpoint
	fmt.Fprintf(&b, "# Checkpoints of checkpointable tasks (docs/CHECKPOINTS.md); interval 0s: only at a preemption.\n")
	fmt.Fprintf(&b, "checkpoint:\n  replication: %d\n  grace: %s\n  max_archive_bytes: %d\n  max_task_bytes: %d\n  max_peer_bytes: %d\n  transfer_timeout: %s\n  gc_interval: %s\n  interval: %s\n",
		ck.Replication, ck.Grace, ck.MaxArchiveBytes, ck.MaxTaskBytes, ck.MaxPeerBytes, ck.TransferTimeout, ck.GCInterval, ck.Interval)
	r := c.Retention
	fmt.Fprintf(&b, "# How long the files of finished tasks stay in the data directory (docs/CONFIG.md); 0s: for good.\n")
	fmt.Fprintf(&b, "retention:\n  outputs: %s\n  blobs: %s\n  tasks: %s\n  interval: %s\n", r.Outputs, r.Blobs, r.Tasks, r.Interval)
	if _, err := Parse("config", b.Bytes()); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return b.Bytes(), nil
}

// Limit is a parsed power limit.
type Limit struct {
	// Percent of the organisation's power quota, when set.
	Percent float64
	// MilliW is an absolute limit, when Percent is not used.
	MilliW int64
	// System means no limit below the ledger's maximum.
	System    bool
	isPercent bool
}

// ParseLimit reads "80%", "250W" (or "250.5 W") or "system".
func ParseLimit(s string) (Limit, error) {
	t := strings.TrimSpace(s)
	switch {
	case strings.EqualFold(t, "system"):
		return Limit{System: true}, nil
	case strings.HasSuffix(t, "%"):
		x, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(t, "%")), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x > 1e6 {
			return Limit{}, fmt.Errorf("limit %q: want a percentage between 0%% and 1000000%%", s)
		}
		return Limit{Percent: x, isPercent: true}, nil
	case strings.HasSuffix(t, "W") || strings.HasSuffix(t, "w"):
		x, err := strconv.ParseFloat(strings.TrimSpace(t[:len(t)-1]), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x*1000 > ledger.MaxLimitMilliW {
			return Limit{}, fmt.Errorf("limit %q: want watts between 0 and %d", s, int64(ledger.MaxLimitMilliW/1000))
		}
		return Limit{MilliW: int64(math.Round(x * 1000))}, nil
	}
	return Limit{}, fmt.Errorf("limit %q: want a percentage (80%%), watts (250W) or system", s)
}

// PercentLimit is a limit of percent of the organisation's power quota.
func PercentLimit(percent float64) Limit { return Limit{Percent: percent, isPercent: true} }

// MilliWatts resolves the limit for an organisation whose machines draw
// powerQuotaMilliW when busy.
func (l Limit) MilliWatts(powerQuotaMilliW int64) int64 {
	switch {
	case l.System:
		return ledger.MaxLimitMilliW
	case l.isPercent:
		x := math.Round(float64(powerQuotaMilliW) * l.Percent / 100)
		return int64(min(x, float64(ledger.MaxLimitMilliW)))
	}
	return l.MilliW
}

// CheckTCPAddr checks a listen or announce address: a multiaddr over TCP.
func CheckTCPAddr(s string) error {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	if _, err := a.ValueForProtocol(ma.P_TCP); err != nil {
		return fmt.Errorf("%q: not a TCP address (the private federation runs on TCP only)", s)
	}
	return nil
}

// CheckBootstrapAddr checks a bootstrap address: a multiaddr ending in
// /p2p/<peer id>.
func CheckBootstrapAddr(s string) error {
	if _, err := p2p.ParseAddr(s); err != nil {
		return err
	}
	return nil
}

// CheckAPIAddr checks the HTTP API's HOST:PORT.
func CheckAPIAddr(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: want HOST:PORT: %v", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q: want HOST:PORT with a host (127.0.0.1 keeps the API local)", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number in 0-65535", s, port)
	}
	return nil
}

// ValidName is the ledger's rule for organisation and machine names.
func ValidName(s string) bool { return ledger.ValidIdent(s, ledger.MaxNameLen) }

// MachinesPath resolves the configured machines file against dataDir.
func (c Config) MachinesPath(dataDir string) string {
	if c.Machines == "" || filepath.IsAbs(c.Machines) {
		return c.Machines
	}
	return filepath.Join(dataDir, c.Machines)
}

// parser reads config.yaml; its errors are *Error (file and line).
type parser struct {
	yamlfile.Parser
	file string
}

func newParser(file string) parser {
	return parser{file: file, Parser: yamlfile.Parser{MakeErr: func(n *yaml.Node, field, msg string) error {
		e := &Error{File: file, Field: field, Msg: msg}
		if n != nil {
			e.Line = n.Line
		}
		return e
	}}}
}

// strOrEmpty accepts a string or nothing (the empty string).
func (p parser) strOrEmpty(n *yaml.Node, field string) (string, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return "", nil
	}
	return p.Str(n, field)
}

func (p parser) strList(n *yaml.Node, field string, check func(string) error) ([]string, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.Errf(n, field, "want a list, got %s", yamlfile.KindName(n))
	}
	out := make([]string, 0, len(n.Content))
	for i, e := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		if e.Kind == yaml.AliasNode {
			return nil, p.Errf(e, f, "aliases are not supported")
		}
		s, err := p.Str(e, f)
		if err != nil {
			return nil, err
		}
		if err := check(s); err != nil {
			return nil, p.Errf(e, f, "%v", err)
		}
		out = append(out, s)
	}
	return out, nil
}

func (p parser) boolean(n *yaml.Node, field string) (bool, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, p.Errf(n, field, "want true or false, got %s", describe(n))
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		return false, p.Errf(n, field, "want true or false, got %q", n.Value)
	}
	return b, nil
}

// number reads a finite, non-negative float.
func (p parser) number(n *yaml.Node, field string) (float64, error) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		return 0, p.Errf(n, field, "want a number, got %s", describe(n))
	}
	var x float64
	if err := n.Decode(&x); err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, p.Errf(n, field, "want a finite number, got %q", n.Value)
	}
	if x < 0 {
		return 0, p.Errf(n, field, "must not be negative, got %s", n.Value)
	}
	return x, nil
}

// size reads a whole number of bytes in [lo, hi].
func (p parser) size(n *yaml.Node, field string, lo, hi int64) (int64, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, p.Errf(n, field, "want a whole number of bytes, got %s", describe(n))
	}
	var x int64
	if err := n.Decode(&x); err != nil {
		return 0, p.Errf(n, field, "want a whole number of bytes, got %q", n.Value)
	}
	if x < lo || x > hi {
		return 0, p.Errf(n, field, "%d out of range [%d, %d]", x, lo, hi)
	}
	return x, nil
}

func (p parser) duration(n *yaml.Node, field string) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return 0, p.Errf(n, field, "want a duration such as 15s or 2m, got %s", describe(n))
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, p.Errf(n, field, "want a duration such as 15s or 2m, got %q", n.Value)
	}
	if d < 0 {
		return 0, p.Errf(n, field, "must not be negative, got %s", n.Value)
	}
	return d, nil
}

func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		return strconv.Quote(n.Value)
	}
	return yamlfile.KindName(n)
}

// ErrNotInitialised says the data directory has no config.yaml.
var ErrNotInitialised = errors.New("not an initialised data directory (run peer init first)")
