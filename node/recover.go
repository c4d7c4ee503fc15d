package node

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/p2p"
)

// RecoverResult is what Recover did to a data directory.
type RecoverResult struct {
	// Self is this data directory's peer.
	Self string
	// Before is the Raft configuration the data held (ID and voter);
	// After the one it holds now: the survivors, all voters.
	Before []RecoveredMember
	After  []string
	// LastIndex and LastTerm are the last entry recovered; Hash the
	// ledger's state hash there. Compare them across the survivors: the
	// one with the highest (term, index) will lead.
	LastIndex, LastTerm uint64
	Hash                string
}

// RecoveredMember is one member of the configuration before recovery.
type RecoveredMember struct {
	ID    string
	Voter bool
}

// Recover rewrites the Raft state of the stopped peer whose data directory
// is dataDir so that the federation's configuration is exactly survivors
// (peer IDs, this peer included), all voters: the restart of a federation
// that lost its majority for good (consensus.Recover; docs/OPERATIONS.md,
// "Recovery"). Run it on every survivor with the same list, then start
// them. A dry run reads the configuration and the last entry and writes
// nothing.
func Recover(dataDir string, survivors []string, dryRun bool, log *slog.Logger) (RecoverResult, error) {
	keyPath := filepath.Join(dataDir, p2p.IdentityFile)
	b, err := os.ReadFile(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return RecoverResult{}, badInput("%s: no identity: is %s a peer's data directory?", keyPath, dataDir)
	}
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: %w", err)
	}
	key, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: identity %s: %w", keyPath, err)
	}
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recover: identity %s: %w", keyPath, err)
	}
	ids := make([]peer.ID, 0, len(survivors))
	for i, s := range survivors {
		id, err := peer.Decode(s)
		if err != nil {
			return RecoverResult{}, badInput("survivor %d, %q: not a peer ID: %v", i+1, s, err)
		}
		ids = append(ids, id)
	}
	res, err := consensus.Recover(filepath.Join(dataDir, config.RaftDir), self, ids, consensus.RecoverOptions{DryRun: dryRun, Logger: log})
	if err != nil {
		return RecoverResult{}, err
	}
	out := RecoverResult{Self: self.String(), LastIndex: res.LastIndex, LastTerm: res.LastTerm, Hash: res.Hash}
	for _, m := range res.Before {
		out.Before = append(out.Before, RecoveredMember{ID: m.ID.String(), Voter: m.Voter})
	}
	for _, id := range res.After {
		out.After = append(out.After, id.String())
	}
	return out, nil
}
