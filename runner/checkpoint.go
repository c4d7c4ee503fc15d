package runner

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/coopgrid/coopgrid/checkpoint"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

const (
	// authReadTimeout bounds the consistent read the authorisation hook
	// falls back on when the local view does not allow a request yet (a
	// follower a few entries behind the peer asking).
	authReadTimeout = 3 * time.Second
	// restoreAttempts is how many times a restore that found no holder able
	// to deliver is tried before the task starts from zero; restoreBackoff
	// is the wait between attempts.
	restoreAttempts = 2
	restoreBackoff  = 250 * time.Millisecond
)

// checkpoints ties the checkpoint package to the peer: the store in
// DATA/checkpoints, the replication service on the libp2p host, the
// authorisation rules (from the ledger), what is done after a stop and
// before a start, and the garbage collection of archives.
type checkpoints struct {
	cfg      CheckpointConfig
	org      string
	self     peer.ID
	ledger   Ledger
	host     host.Host
	tasksDir string
	log      *slog.Logger
	store    *checkpoint.Store
	svc      *checkpoint.Service
	// ctx bounds the authorisation hook's reads: it ends with the runner.
	ctx context.Context
	// tracks says whether the bridge tracks a run of a task (nil without
	// an executor): GC leaves that task's directory alone.
	tracks func(task string) bool

	// gcMu orders packing against collection: a pack holds it for reading
	// until its hash is pending, GC holds it for writing, so GC never
	// deletes an archive packed but not yet marked.
	gcMu sync.RWMutex
	mu   sync.Mutex
	// pending are archives the ledger may not name yet: packed here, or
	// pushed here by another peer, before the stop report that records
	// them is committed. GC keeps them until the time given.
	pending map[string]time.Time
	wake    chan struct{}
	// cost is the last measured time of taking a checkpoint (pack and
	// replicate): the C of the Young/Daly interval (ckinterval.go).
	cost checkpointCost
}

// newCheckpoints opens the store and serves the replication protocol on
// the host; ctx bounds the authorisation hook's reads.
func newCheckpoints(ctx context.Context, rc Config) (*checkpoints, error) {
	cfg := rc.Checkpoint
	store, err := checkpoint.NewStore(checkpoint.StoreConfig{
		Dir:          rc.CheckpointsDir,
		Limits:       checkpoint.Limits{MaxArchiveBytes: cfg.MaxArchiveBytes},
		MaxPeerBytes: cfg.MaxPeerBytes,
		MaxTaskBytes: cfg.MaxTaskBytes,
		Logger:       rc.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("open the checkpoint store: %w", err)
	}
	c := &checkpoints{
		cfg: cfg, org: rc.Org, self: rc.Self, ledger: rc.Ledger, host: rc.Host, tasksDir: rc.TasksDir,
		log: rc.Logger, store: store, ctx: ctx, pending: map[string]time.Time{}, wake: make(chan struct{}, 1),
	}
	c.svc = checkpoint.NewService(rc.Host, store, checkpoint.ServiceConfig{
		Auth:            c.auth,
		TransferTimeout: cfg.TransferTimeout,
		Logger:          rc.Logger,
	})
	return c, nil
}

func (c *checkpoints) close() { c.svc.Close() }

// pendingFor is how long an archive that the ledger does not name yet is
// kept: the pushes of one replication one after another, then the report.
func (c *checkpoints) pendingFor() time.Duration {
	return time.Duration(c.cfg.Replication+1)*c.cfg.TransferTimeout + time.Minute
}

// keep marks hash pending.
func (c *checkpoints) keep(hash string) {
	if !checkpoint.ValidHash(hash) {
		return
	}
	c.mu.Lock()
	c.pending[hash] = time.Now().Add(c.pendingFor())
	c.mu.Unlock()
}

func forbidden(format string, args ...any) error {
	return p2p.Errorf(checkpoint.CodeForbidden, format, args...)
}

// auth is the replication service's authorisation hook, decided on the
// ledger. Only those the task gives a part may push or hold its
// checkpoints (issue 15): its organisation, its executing peer (the owner
// of a machine it is placed on or has a run there still open, which is
// where a final checkpoint is packed after a preemption) and the holders
// of its recorded checkpoint.
//   - push: remote is one of those, and task exists and is not done,
//     failed or cancelled;
//   - fetch: hash is task's recorded checkpoint, and remote is one of
//     those (the peer that restores it runs the task).
//
// The local view is read first; when it refuses, a consistent read
// decides, so that a holder a few entries behind the fetching peer does
// not refuse a legitimate restore.
func (c *checkpoints) auth(remote peer.ID, op checkpoint.Op, hash, task string) error {
	ctx, cancel := context.WithTimeout(c.ctx, authReadTimeout)
	defer cancel()
	err := c.taskView(ctx, task, func(t ledger.Task, l *ledger.Ledger) error {
		org, ok := l.OrgOfPeer(remote.String())
		if !ok {
			return forbidden("peer %s acts for no registered organisation", remote)
		}
		switch op {
		case checkpoint.OpPush:
			if t.State.Terminal() {
				return forbidden("task %s is %s: its checkpoints are not kept", t.ID, t.State)
			}
			if !takesPart(t, l, remote.String(), org) {
				return forbidden("%s (%s) is neither task %s's organisation, nor its executing peer, nor a holder of its checkpoint", remote, org, t.ID)
			}
			return nil
		case checkpoint.OpFetch:
			if t.Checkpoint == nil || t.Checkpoint.Hash != hash {
				return forbidden("%s is not the recorded checkpoint of task %s", hash, t.ID)
			}
			if takesPart(t, l, remote.String(), org) {
				return nil
			}
			return forbidden("task %s is %s%s, not on a machine of %s", t.ID, t.State, onMachineOf(t), org)
		}
		return forbidden("unknown operation %q", op)
	})
	if err == nil && op == checkpoint.OpPush {
		c.keep(hash)
	}
	return err
}

// takesPart says whether peer, acting for org, is task t's organisation,
// its executing peer (the owner of the machine t is placed on, or of a
// machine where a run of t is still open: running, or stopped and not yet
// reported) or a holder of its recorded checkpoint.
func takesPart(t ledger.Task, l *ledger.Ledger, peer, org string) bool {
	if t.Org == org {
		return true
	}
	if t.State.Placed() {
		if m, ok := l.Machine(t.Machine); ok && m.Org == org {
			return true
		}
	}
	for _, s := range t.Segments {
		if s.Outcome.Open() && s.MachineOrg == org {
			return true
		}
	}
	return t.Checkpoint != nil && slices.Contains(t.Checkpoint.Holders, peer)
}

// taskView runs check on task in the local view; if check refuses it (the
// view may lag the peer asking), it reads again consistently before giving
// up.
func (c *checkpoints) taskView(ctx context.Context, task string, check func(ledger.Task, *ledger.Ledger) error) error {
	var err error
	look := func(l *ledger.Ledger) {
		t, ok := l.Task(task)
		if !ok {
			err = p2p.Errorf(checkpoint.CodeNotFound, "task %q is not in the ledger", task)
			return
		}
		err = check(t, l)
	}
	c.ledger.View(look)
	if err == nil {
		return nil
	}
	refused := err
	if rerr := c.ledger.ReadConsistent(ctx, look); rerr != nil {
		return refused
	}
	return err
}

func onMachineOf(t ledger.Task) string {
	if t.Machine == "" {
		return ""
	}
	return " on " + t.Machine
}

// pack packs dir into the store for task and marks the archive pending.
func (c *checkpoints) pack(ctx context.Context, task, dir string) (checkpoint.Archive, error) {
	c.gcMu.RLock()
	defer c.gcMu.RUnlock()
	a, err := c.store.PackDir(ctx, task, dir)
	if err == nil {
		c.keep(a.Hash)
	}
	return a, err
}

// take packs the checkpoint directory dir of a run of t, replicates it and
// returns what the ledger records, or nil when no checkpoint can be
// recorded (logged). startDone is the work the run started from: without
// a progress file the checkpoint claims no more (the state may hold more,
// never less), since the process executor's estimate is an upper bound.
func (c *checkpoints) take(ctx context.Context, t ledger.Task, dir string, startDone int64) *ledger.CheckpointData {
	progress, err := checkpoint.ReadProgress(dir, t.ID, t.SizeMFlop)
	if err != nil {
		if !errors.Is(err, checkpoint.ErrNoProgress) {
			c.log.Warn("checkpoint: progress file ignored", "task", t.ID, "err", err)
		}
		progress = startDone
	}
	began := time.Now()
	defer func() { c.cost.measured(time.Since(began)) }()
	a, err := c.pack(ctx, t.ID, dir)
	if err != nil {
		c.log.Warn("checkpoint not taken: the task resumes from its previous checkpoint", "task", t.ID, "dir", dir, "err", err)
		return nil
	}
	holders, err := c.svc.Replicate(ctx, t.ID, a.Hash, c.candidates(t.ID), c.cfg.Replication)
	if err != nil {
		if len(holders) == 0 {
			c.log.Warn("checkpoint not replicated", "task", t.ID, "hash", a.Hash, "err", err)
			return nil
		}
		c.log.Warn("checkpoint: fewer copies than configured", "task", t.ID, "hash", a.Hash, "holders", len(holders), "want", c.cfg.Replication, "err", err)
	}
	ids := make([]string, len(holders))
	for i, h := range holders {
		ids[i] = h.String()
	}
	c.log.Info("checkpoint taken", "task", t.ID, "hash", a.Hash, "bytes", a.Size, "progress_mflop", progress, "holders", len(ids))
	return &ledger.CheckpointData{Hash: a.Hash, SizeBytes: a.Size, ProgressMFlop: progress, Holders: ids}
}

// candidates are the peers to push task's archive to, in order: the peers
// of the other registered organisations (each organisation has one peer,
// so every candidate belongs to another organisation than this one),
// those this peer is connected to first, each group rotated by a hash of
// the task ID so that the replicas of different tasks spread out.
func (c *checkpoints) candidates(task string) []peer.ID {
	members, err := c.ledger.Members()
	if err != nil {
		c.log.Debug("checkpoint: members", "err", err)
	}
	var ids []peer.ID
	c.ledger.View(func(l *ledger.Ledger) {
		for _, m := range members {
			if m.ID == c.self {
				continue
			}
			if org, ok := l.OrgOfPeer(m.ID.String()); ok && org != c.org {
				ids = append(ids, m.ID)
			}
		}
	})
	slices.SortFunc(ids, func(a, b peer.ID) int {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	if len(ids) > 1 {
		h := fnv.New32a()
		h.Write([]byte(task))
		k := int(h.Sum32() % uint32(len(ids)))
		ids = append(ids[k:], ids[:k]...)
	}
	var up, down []peer.ID
	for _, id := range ids {
		if c.host.Network().Connectedness(id) == network.Connected {
			up = append(up, id)
		} else {
			down = append(down, id)
		}
	}
	return append(up, down...)
}

// dir is task's $CHECKPOINT_DIR on this peer.
func (c *checkpoints) dir(task string) string {
	return filepath.Join(c.tasksDir, task, CheckpointSubdir)
}

// prepare gets the checkpoint directory of a run of t ready before the
// executor starts it: it restores t's recorded checkpoint into dest, or,
// when there is none or it cannot be restored (every holder down, a
// corrupt or mismatching archive, a traversal, over a limit), empties dest
// so that the run starts from zero and never from a state the ledger does
// not describe. It reports whether the checkpoint was restored; an error
// means ctx ended and nothing must be started.
func (c *checkpoints) prepare(ctx context.Context, t ledger.Task, dest string) (bool, error) {
	fresh := func() (bool, error) {
		if err := os.RemoveAll(dest); err != nil {
			return false, fmt.Errorf("empty the checkpoint directory of %s: %w", t.ID, err)
		}
		return false, nil
	}
	ck := t.Checkpoint
	if ck == nil {
		return fresh()
	}
	ref := checkpoint.Ref{Task: t.ID, Hash: ck.Hash, Holders: ck.Holders}
	c.keep(ck.Hash)
	// No holder delivered: they may be restarting, or a few entries
	// behind this peer: try again. A refused archive is final.
	_, err := retry(ctx, pacing{initial: restoreBackoff, ceiling: restoreBackoff, tries: restoreAttempts}, func() (struct{}, error) {
		rctx, cancel := context.WithTimeout(ctx, time.Duration(len(ck.Holders)+1)*c.cfg.TransferTimeout)
		err := checkpoint.Restore(rctx, c.store, c.svc, ref, dest)
		cancel()
		if err != nil && (ctx.Err() != nil || !errors.Is(err, checkpoint.ErrUnavailable)) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, nil)
	if err == nil {
		c.log.Info("checkpoint restored", "task", t.ID, "hash", ck.Hash, "progress_mflop", ck.ProgressMFlop)
		return true, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	c.log.Warn("checkpoint not restored: the task starts from zero and the ledger drops the checkpoint",
		"task", t.ID, "hash", ck.Hash, "bad_archive", errors.Is(err, checkpoint.ErrBadArchive), "err", err)
	return fresh()
}

// poke asks the collector for a pass soon.
func (c *checkpoints) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// gcLoop collects archives at start, every GCInterval and when poked.
func (c *checkpoints) gcLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.GCInterval)
	defer t.Stop()
	// Every task end pokes the collector, and a pass reads every task
	// directory and looks each one up in the ledger (under its read lock):
	// poked passes are paced, at most one per gap, or a peer running many
	// short tasks spends its time collecting (issue 9's profile).
	gap := min(time.Second, c.cfg.GCInterval)
	for {
		c.gc(ctx)
		last := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.wake:
			if !sleep(ctx, time.Until(last.Add(gap))) {
				return
			}
		}
	}
}

// gc deletes every archive that is neither the recorded checkpoint of a
// task that is not done, failed or cancelled, nor pending; and the
// checkpoint directories of this peer's finished tasks. The live set comes
// from a consistent read, so a peer whose log lags never deletes an
// archive a newer entry names.
func (c *checkpoints) gc(ctx context.Context) {
	dirs, _ := os.ReadDir(c.tasksDir)
	entries := c.store.List()
	if len(entries) == 0 && len(dirs) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var (
		live     map[string]bool
		unended  = map[string]bool{} // archives of a task not yet finished
		listed   = map[string]bool{} // archives whose tasks were looked at
		finished []string
	)
	err := c.ledger.ReadConsistent(rctx, func(l *ledger.Ledger) {
		live = l.LiveCheckpoints()
		for _, e := range entries {
			listed[e.Hash] = true
			for _, id := range e.Tasks {
				if t, ok := l.Task(id); ok && !t.State.Terminal() {
					unended[e.Hash] = true
				}
			}
		}
		finished = finished[:0]
		for _, d := range dirs {
			if t, ok := l.Task(d.Name()); ok && t.State.Terminal() {
				finished = append(finished, t.ID)
			}
		}
	})
	if err != nil {
		c.log.Debug("checkpoint gc: no consistent read, skipped", "err", err)
		return
	}
	c.gcMu.Lock()
	now := time.Now()
	c.mu.Lock()
	pending := make(map[string]bool, len(c.pending))
	for h, until := range c.pending {
		// A pending archive stops being pending once the ledger names it
		// (from then on the ledger decides) and when it expires.
		if live[h] || now.After(until) {
			delete(c.pending, h)
			continue
		}
		// It protects only archives of tasks that are not finished (or
		// that arrived after the list was taken, not looked at yet).
		pending[h] = unended[h] || !listed[h]
	}
	c.mu.Unlock()
	_, _, err = c.store.GC(func(h string) bool { return live[h] || pending[h] })
	c.gcMu.Unlock()
	if err != nil {
		c.log.Warn("checkpoint gc", "err", err)
	}
	for _, id := range finished {
		if c.tracks != nil && c.tracks(id) {
			continue // a run of it is still winding down here
		}
		d := c.dir(id)
		if _, err := os.Lstat(d); err == nil {
			if err := os.RemoveAll(d); err != nil {
				c.log.Warn("checkpoint gc: remove the directory of a finished task", "task", id, "err", err)
			}
		}
	}
}
