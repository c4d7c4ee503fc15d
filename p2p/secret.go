package p2p

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/libp2p/go-libp2p/core/pnet"
)

// SecretSize is the length of a federation secret in bytes (libp2p's PSK).
const SecretSize = 32

// maxSecretFileSize bounds what LoadSecretFile reads: a v1 PSK file is about
// 100 bytes; anything much larger is not a secret file.
const maxSecretFileSize = 4096

// GenerateSecret returns a new random federation secret.
func GenerateSecret() (pnet.PSK, error) {
	psk := make([]byte, SecretSize)
	if _, err := io.ReadFull(rand.Reader, psk); err != nil {
		return nil, fmt.Errorf("generate federation secret: %w", err)
	}
	return psk, nil
}

// EncodeSecret returns psk in the PSK v1 file format (base16), the format
// pnet.DecodeV1PSK reads.
func EncodeSecret(psk pnet.PSK) ([]byte, error) {
	if len(psk) != SecretSize {
		return nil, fmt.Errorf("federation secret: %d bytes, want %d", len(psk), SecretSize)
	}
	var b bytes.Buffer
	b.WriteString("/key/swarm/psk/1.0.0/\n/base16/\n")
	b.WriteString(hex.EncodeToString(psk))
	b.WriteString("\n")
	return b.Bytes(), nil
}

// GenerateSecretFile creates a new federation secret at path (mode 0600) and
// returns it. It refuses to overwrite an existing file: replacing the secret
// would cut this peer off from the federation.
func GenerateSecretFile(path string) (pnet.PSK, error) {
	psk, err := GenerateSecret()
	if err != nil {
		return nil, err
	}
	b, err := EncodeSecret(psk)
	if err != nil {
		return nil, err
	}
	if err := writeFileExclusive(path, b); err != nil {
		return nil, fmt.Errorf("write federation secret %s: %w", path, err)
	}
	return psk, nil
}

// LoadSecretFile reads a federation secret in the PSK v1 format (base16,
// base64 or binary encodings, as go-libp2p accepts).
func LoadSecretFile(path string) (pnet.PSK, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("federation secret: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("federation secret %s: %w", path, err)
	}
	if len(b) > maxSecretFileSize {
		return nil, fmt.Errorf("federation secret %s: file larger than %d bytes", path, maxSecretFileSize)
	}
	psk, err := pnet.DecodeV1PSK(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("federation secret %s: not a PSK v1 file: %w", path, err)
	}
	return psk, nil
}
