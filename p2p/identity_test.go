package p2p

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestIdentityEmbedsEd25519Key: the identity coopgrid creates is Ed25519,
// and its peer ID embeds the public key, so that the registered peer ID is
// the key that checks the peer's signed commands (ledger/sign.go).
func TestIdentityEmbedsEd25519Key(t *testing.T) {
	psk, err := GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHost(t, t.TempDir(), psk)
	if h.PrivateKey() == nil || h.PrivateKey().Type() != crypto.Ed25519 {
		t.Fatalf("host key %v, want an Ed25519 key", h.PrivateKey())
	}
	pk, err := peer.ID(h.ID()).ExtractPublicKey()
	if err != nil {
		t.Fatalf("peer ID %s embeds no public key: %v", h.ID(), err)
	}
	if !pk.Equals(h.PrivateKey().GetPublic()) {
		t.Fatal("the peer ID's key is not the host key's public half")
	}
	sig, err := h.PrivateKey().Sign([]byte("m"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := pk.Verify([]byte("m"), sig); err != nil || !ok {
		t.Fatalf("signature by the host key does not verify with the peer ID's key: %v %v", ok, err)
	}
}

// TestNonEd25519IdentityIsRefused: a key of another type in the identity
// file (coopgrid never writes one) is an error, not a peer whose commands
// every ledger refuses.
func TestNonEd25519IdentityIsRefused(t *testing.T) {
	k, _, err := crypto.GenerateECDSAKeyPair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), IdentityFile)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateIdentity(path); err == nil || !strings.Contains(err.Error(), "Ed25519") {
		t.Fatalf("ECDSA identity: %v, want a refusal naming Ed25519", err)
	}
}
