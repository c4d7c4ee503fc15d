package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
)

// HashPrefix starts every archive hash. The whole hash is
// "sha256:" + 64 lowercase hex digits (71 characters), which fits the
// ledger's checkpoint hash field ([A-Za-z0-9:_-], at most 128 characters).
const HashPrefix = "sha256:"

const hashLen = len(HashPrefix) + 2*sha256.Size

// ValidHash reports whether h is a well-formed archive hash. Only such
// strings ever become file names in a store.
func ValidHash(h string) bool {
	if len(h) != hashLen || h[:len(HashPrefix)] != HashPrefix {
		return false
	}
	for _, c := range h[len(HashPrefix):] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func checkHash(h string) error {
	if !ValidHash(h) {
		return fmt.Errorf("%w: %q (want %s followed by 64 lowercase hex digits)", ErrBadHash, truncate(h, 80), HashPrefix)
	}
	return nil
}

// HashBytes returns the archive hash of b.
func HashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return HashPrefix + hex.EncodeToString(sum[:])
}

func newHasher() hash.Hash { return sha256.New() }

func hashOf(h hash.Hash) string { return HashPrefix + hex.EncodeToString(h.Sum(nil)) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
