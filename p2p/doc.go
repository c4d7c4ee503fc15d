// Package p2p is the federation's networking base: a libp2p host with a
// persistent Ed25519 identity, a private network guarded by a pre-shared key
// (the "federation secret"), a file of known peers so that a restart needs no
// bootstrap address, and small request/response streams with length-prefixed,
// size-limited frames and versioned protocol IDs: one exchange per stream
// (Handle, Request), or many on one long-lived stream for a peer that asks
// often (HandleSession, Session).
//
// # Transports
//
// The host listens on TCP only. go-libp2p (checked with v0.51.0) does not run
// QUIC, WebTransport or WebRTC under a pre-shared key: with the private-network
// option it silently drops those listeners. Rather than advertise addresses it
// will never serve, this package configures TCP alone and rejects non-TCP
// listen addresses with a clear error.
//
// # Private network
//
// Every connection is wrapped by libp2p's PSK protector (XSalsa20 keyed by the
// secret) before the security handshake, so a host without the secret, or with
// another one, cannot even complete a connection: the dial fails. The secret
// file uses the PSK v1 format of go-libp2p/core/pnet (the same format as IPFS's
// swarm.key); GenerateSecretFile writes one and LoadSecretFile reads it.
//
// # Data directory
//
//	identity.key      libp2p private key (Ed25519, protobuf encoded), mode 0600
//	known_peers.json  addresses of peers seen, rewritten atomically, mode 0600
//	federation.key    the federation secret, when Config.SecretFile is not set
package p2p
