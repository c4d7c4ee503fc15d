package ledger

import (
	"crypto/sha256"
	"sync"
)

// sigCache remembers the signatures this ledger has verified, so that a
// command checked before it was appended (the leader's dry run, Check) is
// not verified again when its entry applies: an Ed25519 verification is
// the largest part of a small command's Apply (docs/BENCHMARKS.md, issue
// 22). A verification is a pure function of the peer, the signed bytes and
// the signature, so remembering its successes changes no verdict, on this
// peer or between peers: the cache is no part of the state (not hashed,
// not in snapshots). A failure is never remembered.
//
// Check runs under the replica's read lock, possibly in several
// goroutines at once, hence the mutex. The cache holds at most
// sigCacheSize entries, the oldest going first.
type sigCache struct {
	mu   sync.Mutex
	seen map[[sha256.Size]byte]struct{}
	ring [][sha256.Size]byte
	next int
}

// sigCacheSize bounds the cache: far more than the commands in flight
// between a dry run and its apply.
const sigCacheSize = 1024

func newSigCache() *sigCache {
	return &sigCache{seen: make(map[[sha256.Size]byte]struct{}, sigCacheSize)}
}

// sigKey names one verification: who, what, and the signature.
func sigKey(peer string, signing, sig []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(peer))
	h.Write([]byte{0})
	h.Write(sig)
	h.Write(signing)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// verified says whether the verification k succeeded before. A nil cache
// remembers nothing.
func (s *sigCache) verified(k [sha256.Size]byte) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.seen[k]
	return ok
}

// remember records that the verification k succeeded.
func (s *sigCache) remember(k [sha256.Size]byte) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[k]; ok {
		return
	}
	if len(s.ring) < sigCacheSize {
		s.ring = append(s.ring, k)
	} else {
		delete(s.seen, s.ring[s.next])
		s.ring[s.next] = k
		s.next = (s.next + 1) % sigCacheSize
	}
	s.seen[k] = struct{}{}
}
