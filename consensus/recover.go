package consensus

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.etcd.io/bbolt"
)

// Recovery of a federation that lost its majority for good (docs/OPERATIONS.md,
// "Recovery"). No configuration change can commit without a majority of
// the voters, so the survivors cannot vote the dead out: the operator
// stops every survivor, runs Recover on each with the same list of
// survivors, and starts them again. This is hashicorp/raft's
// RecoverCluster, the way Consul applies a peers.json: the survivor's
// snapshot and log are replayed through the ledger, written back as one
// snapshot whose configuration is the survivors, all voters, and the log
// is compacted behind it. The survivors then elect a leader among
// themselves; the most up-to-date one wins (Raft's election rule) and
// brings the others to its state.
//
// What recovery cannot do: an entry the dead majority committed but no
// survivor received is gone (run Recover on every survivor, and compare
// the indexes it prints); and the dead must never come back with their old
// data, for with the old configuration they could elect a second leader
// among themselves. They rejoin with a fresh data directory and a new
// invitation.

// RecoverResult describes what Recover did.
type RecoverResult struct {
	// Before is the configuration the peer's data held; After the one it
	// holds now (every survivor, all voters).
	Before []Member
	After  []peer.ID
	// LastIndex and LastTerm are the last log entry recovered: the
	// survivor with the highest (term, index) wins the election.
	LastIndex, LastTerm uint64
	// Hash is the ledger's state hash at LastIndex.
	Hash string
}

// RecoverOptions tune Recover.
type RecoverOptions struct {
	// DryRun reads the configuration and the last entry and changes
	// nothing; survivors may then be empty.
	DryRun bool
	Logger *slog.Logger
}

// recoverLockTimeout bounds the wait for raft.db's lock: a running peer
// holds it.
const recoverLockTimeout = time.Second

// Recover rewrites the stopped peer self's Raft state in raftDir so that
// its configuration is exactly survivors, all voters. self must be one of
// them, and every survivor a member of the configuration the data holds
// (a mistyped ID would count towards the quorum and never answer); a
// refusal leaves the data as it was. The replay applies what the data
// holds as the running peer would; peer verify checks the ledger's
// invariants over it, before or after.
func Recover(raftDir string, self peer.ID, survivors []peer.ID, opt RecoverOptions) (RecoverResult, error) {
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(survivors) == 0 && !opt.DryRun {
		return RecoverResult{}, errors.New("recover: name the surviving peers (this one included)")
	}
	if !slices.Contains(survivors, self) && !opt.DryRun {
		return RecoverResult{}, fmt.Errorf("recover: this peer (%s) is not among the survivors named", self)
	}
	seen := map[peer.ID]bool{}
	for _, id := range survivors {
		if seen[id] {
			return RecoverResult{}, fmt.Errorf("recover: %s named twice", id)
		}
		seen[id] = true
	}
	dbPath := filepath.Join(raftDir, RaftDBFile)
	if _, err := os.Stat(dbPath); err != nil {
		return RecoverResult{}, fmt.Errorf("recover: %s: %w (is this a peer's data directory?)", dbPath, err)
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: dbPath, BoltOptions: &bbolt.Options{Timeout: recoverLockTimeout}})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return RecoverResult{}, fmt.Errorf("recover: %s is locked: stop the peer first", dbPath)
		}
		return RecoverResult{}, fmt.Errorf("recover: open %s: %w", dbPath, err)
	}
	defer store.Close()
	hlog := newRaftLogger(log)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(raftDir, DefaultConfig(raftDir).SnapshotRetain, hlog.Named("snapshots"))
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: snapshot store: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(self.String())
	rc.Logger = hlog
	rc.NoLegacyTelemetry = true
	_, trans := raft.NewInmemTransport(raft.ServerAddress(self.String()))
	defer trans.Close()

	before, err := raft.GetConfiguration(rc, newFSM(false, log), store, store, snaps, trans)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: read the configuration: %w", err)
	}
	res := RecoverResult{After: survivors}
	for _, s := range before.Servers {
		id, err := peer.Decode(string(s.ID))
		if err != nil {
			continue
		}
		res.Before = append(res.Before, Member{ID: id, Voter: s.Suffrage == raft.Voter})
	}
	if opt.DryRun {
		res.LastIndex, res.LastTerm, err = lastEntry(store, snaps)
		return res, err
	}
	var cfg raft.Configuration
	for _, id := range survivors {
		if !slices.ContainsFunc(res.Before, func(m Member) bool { return m.ID == id }) {
			return RecoverResult{}, fmt.Errorf("recover: %s is not a member of the configuration this data holds (peer members, or the Before list of a dry run, names them)", id)
		}
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id.String()), Address: raft.ServerAddress(id.String())})
	}

	f := newFSM(false, log)
	if err := raft.RecoverCluster(rc, f, store, store, snaps, trans, cfg); err != nil {
		return RecoverResult{}, fmt.Errorf("recover: %w", err)
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return RecoverResult{}, fmt.Errorf("recover: the new snapshot: %v", err)
	}
	res.LastIndex, res.LastTerm = list[0].Index, list[0].Term
	f.view(func(l *ledger.Ledger) { res.Hash = l.Hash() })
	log.Info("consensus: recovered", "index", res.LastIndex, "term", res.LastTerm, "voters", len(survivors))
	return res, nil
}

// lastEntry is the last entry's index and term: the log's, or the newest
// snapshot's when the log is empty behind it.
func lastEntry(logs raft.LogStore, snaps raft.SnapshotStore) (index, term uint64, err error) {
	if list, err := snaps.List(); err == nil && len(list) > 0 {
		index, term = list[0].Index, list[0].Term
	}
	last, err := logs.LastIndex()
	if err != nil {
		return 0, 0, fmt.Errorf("recover: last index: %w", err)
	}
	if last > index {
		var e raft.Log
		if err := logs.GetLog(last, &e); err != nil {
			return 0, 0, fmt.Errorf("recover: entry %d: %w", last, err)
		}
		index, term = e.Index, e.Term
	}
	return index, term, nil
}
