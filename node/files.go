package node

import (
	"context"
	"path/filepath"

	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/coopgrid/coopgrid/transfer"
	"github.com/libp2p/go-libp2p/core/peer"
)

// newTransfer starts the file protocols (package transfer) on the node's
// host, data directory and ledger.
func (n *Node) newTransfer() (*transfer.Service, error) {
	files := n.cfg.Files
	l := transferLedger{isMember: n.isMember, peerOf: n.peerOfOrg, task: n.taskView}
	return transfer.New(transfer.Config{
		Host: n.host,
		Org:  n.org,
		Dirs: transfer.Dirs{
			Blobs:   filepath.Join(n.dir, config.BlobsDir),
			Outputs: filepath.Join(n.dir, config.OutputsDir),
			Tasks:   n.tasksDir(),
		},
		Limits: transfer.Limits{
			MaxInputBytes:  files.MaxInputBytes,
			MaxOutputBytes: files.MaxOutputBytes,
			MaxLogBytes:    files.MaxLogBytes,
			FetchTimeout:   files.FetchTimeout,
		},
		Members: l,
		Tasks:   l,
		Logger:  n.log,
	})
}

// transferLedger answers transfer's questions (transfer.Members,
// transfer.Tasks) with the node's reads of the Raft configuration and the
// ledger.
type transferLedger struct {
	isMember func(peer.ID) bool
	peerOf   func(org string) (peer.ID, error)
	task     func(ctx context.Context, id string, check transfer.Check) (ledger.Task, error)
}

func (l transferLedger) IsMember(p peer.ID) bool            { return l.isMember(p) }
func (l transferLedger) PeerOf(org string) (peer.ID, error) { return l.peerOf(org) }
func (l transferLedger) Task(ctx context.Context, id string, check transfer.Check) (ledger.Task, error) {
	return l.task(ctx, id, check)
}

// taskView reads a task from the local view; if check fails on it (the
// view may lag the leader), it reads again consistently before giving up.
func (n *Node) taskView(ctx context.Context, id string, check transfer.Check) (ledger.Task, error) {
	var (
		t   ledger.Task
		ok  bool
		err error
	)
	look := func(l *ledger.Ledger) {
		t, ok = l.Task(id)
		if !ok {
			err = p2p.Errorf(transfer.CodeNotFound, "task %q is not in the ledger", id)
			return
		}
		err = check(t, l)
	}
	n.cons.View(look)
	if err == nil {
		return t, nil
	}
	if rerr := n.cons.ReadConsistent(ctx, look); rerr != nil {
		return t, err
	}
	return t, err
}
