package p2p

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// LoadOrCreateIdentity returns the private key stored at path, creating a new
// Ed25519 key there (mode 0600) if the file does not exist. A file that exists
// but does not hold a valid key is an error, never silently replaced: the peer
// ID is the peer's name in the Raft configuration and must not change.
//
// The key must be Ed25519: its peer ID then embeds the public key (an
// identity multihash), which is how every peer checks the signature of a
// command this peer authored (ledger/sign.go) with nothing registered but
// the peer ID. coopgrid has only ever created Ed25519 identities; a key of
// another type (placed by hand) is refused rather than left to have every
// command it signs refused.
func LoadOrCreateIdentity(path string) (crypto.PrivKey, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		k, err := crypto.UnmarshalPrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("identity %s: %w", path, err)
		}
		if k.Type() != crypto.Ed25519 {
			return nil, fmt.Errorf("identity %s: a %s key; a coopgrid peer's identity is Ed25519 (its peer ID carries the key that checks its signed commands)", path, k.Type())
		}
		return k, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("identity %s: %w", path, err)
	}
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate identity: %w", err)
	}
	b, err = crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encode identity: %w", err)
	}
	if err := writeFileExclusive(path, b); err != nil {
		return nil, fmt.Errorf("identity %s: %w", path, err)
	}
	return k, nil
}

// writeFileExclusive creates path with mode 0600 and fails if it exists, so
// two processes starting on the same directory cannot overwrite each other's
// key. The directory is created (0700) if needed.
func writeFileExclusive(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
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

// writeFileAtomic replaces path with b (mode 0600) through a temporary file
// and a rename, so a crash leaves either the old or the new content.
func writeFileAtomic(path string, b []byte) error { return replaceFile(path, b, true) }

// replaceFile is writeFileAtomic, with the sync of the content optional: an
// unsynced replacement survives the process being killed (the page cache
// outlives it), not the machine losing power.
func replaceFile(path string, b []byte, sync bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			os.Remove(tmp)
			return err
		}
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// PrivateKey is the host's Ed25519 identity key: it signs the ledger
// commands this peer authors (ledger.EncodeSigned), and its peer ID (ID)
// embeds the public half that every peer verifies them with.
func (h *Host) PrivateKey() crypto.PrivKey { return h.key }
