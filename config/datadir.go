package config

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"gopkg.in/yaml.v3"
)

// The data directory (docs/CONFIG.md):
//
//	config.yaml        this peer's configuration
//	identity.key       libp2p private key (Ed25519), 0600
//	federation.key     the federation secret (PSK), 0600
//	known_peers.json   peers seen, so a restart needs no bootstrap address
//	machines.yaml      the machines offered and the owner's policy
//	api.token          bearer token of the HTTP API, 0600
//	raft/              raft.db (bolt log and stable store) and snapshots/
//	blobs/<sha256>     input files of tasks this peer submitted or fetched
//	outputs/<task-id>/ outputs returned for this organisation's tasks
//	tasks/             the executor's work directories
//	boot               the boot stamp of the latest start (heartbeat replay guard)
//	runs.jsonl         the process executor's run journal (+ .1 … rotated, .lock)
//	history.db         this organisation's finished tasks that left the replicated state (package history)
const (
	ConfigFile   = "config.yaml"
	MachinesFile = "machines.yaml"
	TokenFile    = api.TokenFile
	RaftDir      = "raft"
	BlobsDir     = "blobs"
	OutputsDir   = "outputs"
	TasksDir     = "tasks"
)

// ErrInitialised is returned by Init for a directory that already holds a
// peer.
var ErrInitialised = errors.New("data directory already initialised")

// InputError is Init's error for bad input (an option, the machines file,
// the secret file), as opposed to a failure to write the directory.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func badInput(format string, args ...any) error {
	return &InputError{Err: fmt.Errorf(format, args...)}
}

// InitOptions are the inputs of `peer init`.
type InitOptions struct {
	DataDir string
	Org     string
	// MachinesFile is the machines file to offer; "" offers none.
	MachinesFile string
	// Exactly one of NewFederation and SecretFile.
	NewFederation bool
	SecretFile    string
	// Listen and API override the defaults written to config.yaml.
	Listen []string
	API    string
	// MeasureFor is how long the GFLOPS benchmark runs for machines
	// declared without gflops (default 2s).
	MeasureFor time.Duration
	// Config, when set, edits the config before it is written (for tools
	// and tests: executor kind, timeouts...).
	Config func(*Config)
}

// InitResult says what Init created.
type InitResult struct {
	Org           string        `json:"org"`
	DataDir       string        `json:"data_dir"`
	PeerID        string        `json:"peer_id"`
	NewFederation bool          `json:"new_federation"`
	ConfigFile    string        `json:"config_file"`
	SecretFile    string        `json:"secret_file"`
	TokenFile     string        `json:"api_token_file"`
	MachinesFile  string        `json:"machines_file,omitempty"`
	Machines      []InitMachine `json:"machines"`
}

// InitMachine is one machine as registered, with whether its GFLOPS was
// measured by Init.
type InitMachine struct {
	Name      string  `json:"name"`
	GFLOPS    float64 `json:"gflops"`
	BusyWatts float64 `json:"busy_watts"`
	IdleWatts float64 `json:"idle_watts,omitempty"`
	Measured  bool    `json:"measured"`
}

// Init creates a peer's data directory: identity, federation secret (new
// or copied), machines file (GFLOPS measured where missing), API token and
// config. Everything is checked before anything is written; it refuses a
// directory that already holds a peer, and on failure removes what it
// created.
func Init(ctx context.Context, o InitOptions) (InitResult, error) {
	if o.DataDir == "" {
		return InitResult{}, badInput("init: no data directory")
	}
	if !ValidName(o.Org) {
		return InitResult{}, badInput("init: organisation %q: want 1-64 characters of [A-Za-z0-9._-] starting with a letter or digit", o.Org)
	}
	if o.NewFederation == (o.SecretFile != "") {
		return InitResult{}, badInput("init: give exactly one of --new-federation (start a federation) and --secret FILE (join one)")
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return InitResult{}, fmt.Errorf("init: %w", err)
	}
	if err := checkFresh(dir); err != nil {
		return InitResult{}, err
	}

	// Inputs first: nothing is written until they are all good.
	var secret []byte
	if o.SecretFile != "" {
		psk, err := p2p.LoadSecretFile(o.SecretFile)
		if err != nil {
			return InitResult{}, badInput("init: %w", err)
		}
		if len(psk) != p2p.SecretSize {
			return InitResult{}, badInput("init: federation secret %s has %d bytes, want %d", o.SecretFile, len(psk), p2p.SecretSize)
		}
		if secret, err = p2p.EncodeSecret(psk); err != nil {
			return InitResult{}, fmt.Errorf("init: %w", err)
		}
	}
	cfg := Default(o.Org)
	cfg.NewFederation = o.NewFederation
	if len(o.Listen) > 0 {
		cfg.Listen = append([]string(nil), o.Listen...)
	}
	if o.API != "" {
		cfg.API = o.API
	}
	res := InitResult{Org: o.Org, DataDir: dir, NewFederation: o.NewFederation, Machines: []InitMachine{}}
	var machines []byte
	if o.MachinesFile != "" {
		mf, err := executor.LoadMachinesFile(o.MachinesFile)
		if err != nil {
			return InitResult{}, badInput("init: %w", err)
		}
		if mf.Slurm != nil {
			// The machines are the Slurm cluster's nodes, listed at each
			// start (docs/SLURM.md): the file is kept as written.
			if machines, err = os.ReadFile(o.MachinesFile); err != nil {
				return InitResult{}, badInput("init: %w", err)
			}
		} else {
			d := o.MeasureFor
			if d <= 0 {
				d = 2 * time.Second
			}
			measured, err := mf.MeasureMissingGFLOPS(ctx, d)
			if err != nil {
				return InitResult{}, fmt.Errorf("init: %w", err)
			}
			isMeasured := map[string]bool{}
			for _, n := range measured {
				isMeasured[n] = true
			}
			for _, m := range mf.Machines {
				res.Machines = append(res.Machines, InitMachine{Name: m.Name, GFLOPS: m.GFLOPS, BusyWatts: m.BusyWatts, IdleWatts: m.IdleWatts, Measured: isMeasured[m.Name]})
			}
			if machines, err = encodeMachinesFile(mf); err != nil {
				return InitResult{}, fmt.Errorf("init: machines file: %w", err)
			}
		}
		cfg.Machines = MachinesFile
	}
	if o.Config != nil {
		o.Config(&cfg)
		cfg.Org, cfg.NewFederation = o.Org, o.NewFederation
		if machines != nil {
			cfg.Machines = MachinesFile
		}
	}
	cfgBytes, err := cfg.Marshal()
	if err != nil {
		return InitResult{}, badInput("init: %w", err)
	}

	// Now write, undoing everything on failure.
	var created []string
	madeDir := false
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		madeDir = true
	}
	ok := false
	defer func() {
		if ok {
			return
		}
		if madeDir {
			os.RemoveAll(dir)
			return
		}
		for i := len(created) - 1; i >= 0; i-- {
			os.RemoveAll(created[i])
		}
	}()
	if _, err := os.Stat(filepath.Join(dir, TasksDir)); errors.Is(err, fs.ErrNotExist) {
		created = append(created, filepath.Join(dir, TasksDir))
	}
	if err := layOut(dir); err != nil {
		return InitResult{}, fmt.Errorf("init: %w", err)
	}
	write := func(name string, b []byte) (string, error) {
		p := filepath.Join(dir, name)
		if err := writeExclusive(p, b); err != nil {
			return "", fmt.Errorf("init: %w", err)
		}
		created = append(created, p)
		return p, nil
	}
	keyPath := filepath.Join(dir, p2p.IdentityFile)
	key, err := p2p.LoadOrCreateIdentity(keyPath)
	if err != nil {
		return InitResult{}, fmt.Errorf("init: %w", err)
	}
	created = append(created, keyPath)
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return InitResult{}, fmt.Errorf("init: identity: %w", err)
	}
	res.PeerID = id.String()
	res.SecretFile = filepath.Join(dir, p2p.SecretFile)
	if o.NewFederation {
		if _, err := p2p.GenerateSecretFile(res.SecretFile); err != nil {
			return InitResult{}, fmt.Errorf("init: %w", err)
		}
		created = append(created, res.SecretFile)
	} else if _, err := write(p2p.SecretFile, secret); err != nil {
		return InitResult{}, err
	}
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return InitResult{}, fmt.Errorf("init: api token: %w", err)
	}
	if res.TokenFile, err = write(TokenFile, []byte(hex.EncodeToString(token)+"\n")); err != nil {
		return InitResult{}, err
	}
	if machines != nil {
		if res.MachinesFile, err = write(MachinesFile, machines); err != nil {
			return InitResult{}, err
		}
	}
	// The config goes last: its presence is what marks the directory as
	// initialised.
	if res.ConfigFile, err = write(ConfigFile, cfgBytes); err != nil {
		return InitResult{}, err
	}
	ok = true
	return res, nil
}

// layOut creates the data directory so that a dedicated run_as user
// reaches its task directories and nothing else: the data directory and
// DATA/tasks are searchable but not listable by others (0711), and every
// other entry is the peer's alone (files 0600, directories 0700, made so
// by whoever creates them). The modes are set explicitly: the umask must
// not decide, and a directory made beforehand (systemd's StateDirectory)
// gets them too.
func layOut(dir string) error {
	for _, d := range []string{dir, filepath.Join(dir, TasksDir)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// checkFresh refuses a directory that holds a peer (or part of one).
func checkFresh(dir string) error {
	for _, name := range []string{ConfigFile, p2p.IdentityFile, p2p.SecretFile, RaftDir, TokenFile} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return fmt.Errorf("init %s: %w (%s exists); use a new directory, or peer run --data %s", dir, ErrInitialised, name, dir)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("init %s: %w", dir, err)
		}
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return fmt.Errorf("init %s: not a directory", dir)
	}
	return nil
}

// writeExclusive creates path (0600) and fails if it exists.
func writeExclusive(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// encodeMachinesFile writes a machines file back as YAML, with the
// measured GFLOPS filled in, and checks that it parses to the same thing.
func encodeMachinesFile(mf *executor.MachinesFile) ([]byte, error) {
	var b strings.Builder
	q := func(s string) string {
		out, err := yaml.Marshal(s)
		if err != nil {
			return strconv.Quote(s)
		}
		return strings.TrimSuffix(string(out), "\n")
	}
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	b.WriteString("# Machines this peer offers and the owner's policy (docs/EXECUTOR.md).\n")
	b.WriteString("# Written by peer init; gflops were measured where the original left them out.\n")
	b.WriteString("machines:\n")
	for _, m := range mf.Machines {
		fmt.Fprintf(&b, "  - name: %s\n", q(m.Name))
		if m.GFLOPS != 0 {
			fmt.Fprintf(&b, "    gflops: %s\n", num(m.GFLOPS))
		}
		fmt.Fprintf(&b, "    busy_watts: %s\n", num(m.BusyWatts))
		if m.IdleWatts != 0 {
			fmt.Fprintf(&b, "    idle_watts: %s\n", num(m.IdleWatts))
		}
		for _, kv := range []struct {
			k string
			v int64
		}{{"cpus", m.CPUs}, {"memory", m.MemoryBytes}, {"gpus", m.GPUs}} {
			if kv.v != 0 {
				fmt.Fprintf(&b, "    %s: %d\n", kv.k, kv.v)
			}
		}
		if len(m.Labels) > 0 {
			b.WriteString("    labels:\n")
			for _, l := range m.Labels {
				fmt.Fprintf(&b, "      - %s\n", q(l))
			}
		}
		if m.Opportunistic {
			b.WriteString("    opportunistic: true\n")
		}
		if m.ReclaimLoad > 0 {
			fmt.Fprintf(&b, "    reclaim_load: %s\n", strconv.FormatFloat(m.ReclaimLoad, 'g', -1, 64))
		}
		for _, kv := range []struct {
			k string
			v time.Duration
		}{{"reclaim_after", m.ReclaimAfter}, {"release_after", m.ReleaseAfter}} {
			if kv.v != 0 {
				fmt.Fprintf(&b, "    %s: %s\n", kv.k, kv.v)
			}
		}
	}
	p := mf.Policy
	if !reflect.DeepEqual(p, executor.Policy{}) {
		b.WriteString("policy:\n")
		if len(p.Allow) > 0 {
			b.WriteString("  allow:\n")
			for _, a := range p.Allow {
				fmt.Fprintf(&b, "    - %s\n", q(a))
			}
		}
		if p.AllowAny {
			b.WriteString("  allow_any: true\n")
		}
		if len(p.Orgs) > 0 {
			b.WriteString("  orgs:\n")
			for _, o := range p.Orgs {
				fmt.Fprintf(&b, "    - %s\n", q(o))
			}
		}
		if p.RunAs != "" {
			fmt.Fprintf(&b, "  run_as: %s\n", q(p.RunAs))
		}
		if p.UnsafeRunAsPeerUser {
			b.WriteString("  unsafe_run_as_peer_user: true\n")
		}
		if p.Path != "" {
			fmt.Fprintf(&b, "  path: %s\n", q(p.Path))
		}
		if p.MaxWallClock != 0 {
			fmt.Fprintf(&b, "  max_wall_clock: %s\n", p.MaxWallClock)
		}
		if p.KillGrace != 0 {
			fmt.Fprintf(&b, "  kill_grace: %s\n", p.KillGrace)
		}
		if p.KeepTaskDirs != 0 {
			fmt.Fprintf(&b, "  keep_task_dirs: %s\n", p.KeepTaskDirs)
		}
		if p.MaxCPUs != 0 {
			fmt.Fprintf(&b, "  max_cpus: %s\n", num(p.MaxCPUs))
		}
		for _, kv := range []struct {
			k string
			v uint64
		}{
			{"max_cpu_seconds", p.MaxCPUSeconds},
			{"max_address_space_bytes", p.MaxAddressSpaceBytes},
			{"max_processes", p.MaxProcesses},
			{"max_input_bytes", uint64(p.MaxInputBytes)},
			{"max_output_bytes", uint64(p.MaxOutputBytes)},
			{"max_output_files", uint64(p.MaxOutputFiles)},
			{"max_log_bytes", uint64(p.MaxLogBytes)},
			{"max_memory_bytes", p.MaxMemoryBytes},
			{"max_disk_bytes", uint64(p.MaxDiskBytes)},
		} {
			if kv.v != 0 {
				fmt.Fprintf(&b, "  %s: %d\n", kv.k, kv.v)
			}
		}
	}
	out := []byte(b.String())
	back, err := executor.ParseMachinesFile(MachinesFile, out)
	if err != nil {
		return nil, fmt.Errorf("re-reading the written file: %w", err)
	}
	if !reflect.DeepEqual(back, mf) {
		return nil, fmt.Errorf("re-reading the written file gives %+v, not %+v", back, mf)
	}
	return out, nil
}
