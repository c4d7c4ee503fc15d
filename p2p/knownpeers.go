package p2p

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// maxKnownPeersFileSize bounds what is read back from the known-peers file.
const maxKnownPeersFileSize = 8 << 20

// maxAddrsPerPeer bounds how many addresses are remembered for one peer.
const maxAddrsPerPeer = 16

// KnownPeer is one remembered peer.
type KnownPeer struct {
	ID       peer.ID
	Addrs    []ma.Multiaddr
	LastSeen time.Time
}

// knownPeers is the on-disk address book. It is a cache: losing it costs a
// bootstrap address at the next start, nothing more.
type knownPeers struct {
	path  string
	self  peer.ID
	max   int
	mu    sync.Mutex
	peers map[peer.ID]*KnownPeer
}

type knownPeersFile struct {
	Version int             `json:"version"`
	Peers   []knownPeerJSON `json:"peers"`
}

type knownPeerJSON struct {
	ID       string    `json:"id"`
	Addrs    []string  `json:"addrs"`
	LastSeen time.Time `json:"last_seen"`
}

// loadKnownPeers reads path. A missing file is an empty book. Entries that do
// not parse are skipped and reported in the returned error list, so that one
// bad line does not cost the whole book.
func loadKnownPeers(path string, self peer.ID, max int) (*knownPeers, []error, error) {
	kp := &knownPeers{path: path, self: self, max: max, peers: map[peer.ID]*KnownPeer{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return kp, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("known peers %s: %w", path, err)
	}
	if len(b) > maxKnownPeersFileSize {
		return nil, nil, fmt.Errorf("known peers %s: larger than %d bytes", path, maxKnownPeersFileSize)
	}
	var f knownPeersFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("known peers %s: %w", path, err)
	}
	if f.Version != 1 {
		return nil, nil, fmt.Errorf("known peers %s: unsupported version %d", path, f.Version)
	}
	var skipped []error
	for i, e := range f.Peers {
		id, err := peer.Decode(e.ID)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("entry %d: peer id %q: %w", i, e.ID, err))
			continue
		}
		if id == self {
			continue
		}
		var addrs []ma.Multiaddr
		for _, s := range e.Addrs {
			a, err := ma.NewMultiaddr(s)
			if err != nil {
				skipped = append(skipped, fmt.Errorf("entry %d: address %q: %w", i, s, err))
				continue
			}
			addrs = append(addrs, a)
		}
		if len(addrs) == 0 {
			continue
		}
		kp.peers[id] = &KnownPeer{ID: id, Addrs: addrs, LastSeen: e.LastSeen}
	}
	kp.trimLocked()
	return kp, skipped, nil
}

// observe records addrs for id. It reports whether the stored addresses
// changed (then the file should be saved).
func (kp *knownPeers) observe(id peer.ID, addrs []ma.Multiaddr, now time.Time) bool {
	if id == kp.self || len(addrs) == 0 {
		return false
	}
	if len(addrs) > maxAddrsPerPeer {
		addrs = addrs[:maxAddrsPerPeer]
	}
	kp.mu.Lock()
	defer kp.mu.Unlock()
	old, ok := kp.peers[id]
	if ok {
		old.LastSeen = now
		if sameAddrs(old.Addrs, addrs) {
			return false
		}
		old.Addrs = slices.Clone(addrs)
		return true
	}
	kp.peers[id] = &KnownPeer{ID: id, Addrs: slices.Clone(addrs), LastSeen: now}
	kp.trimLocked()
	return true
}

func (kp *knownPeers) forget(id peer.ID) bool {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	_, ok := kp.peers[id]
	delete(kp.peers, id)
	return ok
}

// trimLocked drops the least recently seen peers beyond the bound.
func (kp *knownPeers) trimLocked() {
	if kp.max <= 0 || len(kp.peers) <= kp.max {
		return
	}
	all := kp.sortedLocked()
	for _, p := range all[kp.max:] {
		delete(kp.peers, p.ID)
	}
}

// sortedLocked returns the peers, most recently seen first (ID breaks ties).
func (kp *knownPeers) sortedLocked() []KnownPeer {
	out := make([]KnownPeer, 0, len(kp.peers))
	for _, p := range kp.peers {
		out = append(out, KnownPeer{ID: p.ID, Addrs: slices.Clone(p.Addrs), LastSeen: p.LastSeen})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastSeen.Equal(out[j].LastSeen) {
			return out[i].LastSeen.After(out[j].LastSeen)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (kp *knownPeers) list() []KnownPeer {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	return kp.sortedLocked()
}

// save writes the file; synced, unless sync is false (see Host.saveLoop).
func (kp *knownPeers) save(sync bool) error {
	// The lock is held through the write so that two saves cannot land in
	// the wrong order.
	kp.mu.Lock()
	defer kp.mu.Unlock()
	f := knownPeersFile{Version: 1}
	for _, p := range kp.sortedLocked() {
		e := knownPeerJSON{ID: p.ID.String(), LastSeen: p.LastSeen.UTC()}
		for _, a := range p.Addrs {
			e.Addrs = append(e.Addrs, a.String())
		}
		f.Peers = append(f.Peers, e)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("known peers: %w", err)
	}
	if err := replaceFile(kp.path, append(b, '\n'), sync); err != nil {
		return fmt.Errorf("known peers %s: %w", kp.path, err)
	}
	return nil
}

func sameAddrs(a, b []ma.Multiaddr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
