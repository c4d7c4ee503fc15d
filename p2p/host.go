package p2p

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

// File names inside Config.DataDir.
const (
	IdentityFile   = "identity.key"
	KnownPeersFile = "known_peers.json"
	SecretFile     = "federation.key"
)

// DefaultListenAddr is the listen address when Config.ListenAddrs is empty.
const DefaultListenAddr = "/ip4/0.0.0.0/tcp/9440"

// Config configures a Host. The zero value plus a DataDir is usable once a
// secret file exists there; DefaultConfig documents the defaults.
type Config struct {
	// DataDir holds the identity, the known-peers file and, by default, the
	// federation secret. Required.
	DataDir string
	// ListenAddrs are TCP multiaddrs to listen on (default DefaultListenAddr).
	ListenAddrs []string
	// AnnounceAddrs, when set, replace the addresses this host advertises to
	// others (for hosts behind NAT or port forwarding).
	AnnounceAddrs []string
	// Secret is the federation secret. When nil it is read from SecretFile.
	Secret pnet.PSK
	// SecretFile defaults to DataDir/federation.key.
	SecretFile string
	// MaxMessageSize bounds request/response payloads
	// (default DefaultMaxMessageSize).
	MaxMessageSize int
	// RequestTimeout bounds a request/response exchange whose context has no
	// deadline, and a handler's run (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// MaxKnownPeers bounds the known-peers file (default 512).
	MaxKnownPeers int
	// KnownPeersSaveDelay is how long a change to the known peers waits
	// before the file is synced to disk (default 5 s; it is written at
	// once, unsynced, and at most every 2 s after), so that the changes of
	// that time share one sync:
	// while a federation forms every member learns of every joiner (at
	// 100 peers on one host, 10,000 synced writes; docs/BENCHMARKS.md).
	// Close writes and syncs what is pending.
	KnownPeersSaveDelay time.Duration
	// NATPortMap asks the router for a port mapping (UPnP / NAT-PMP).
	NATPortMap bool
	// UserAgent is what this host announces to every peer it connects to
	// (libp2p identify's agent version; AgentVersion reads a peer's). The
	// node announces its build and the command version it applies in it.
	// Default: libp2p's (the main module's path).
	UserAgent string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Gater, when set, is installed as the host's connection gater and
	// SetBlocked drives it (fault injection only; nil in production).
	Gater *Gater
}

// DefaultConfig returns the defaults for a data directory.
func DefaultConfig(dataDir string) Config {
	return Config{
		DataDir:        dataDir,
		ListenAddrs:    []string{DefaultListenAddr},
		SecretFile:     filepath.Join(dataDir, SecretFile),
		MaxMessageSize: DefaultMaxMessageSize,
		RequestTimeout: DefaultRequestTimeout,
		MaxKnownPeers:  512,

		KnownPeersSaveDelay: 5 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig(c.DataDir)
	if len(c.ListenAddrs) == 0 {
		c.ListenAddrs = d.ListenAddrs
	}
	if c.SecretFile == "" {
		c.SecretFile = d.SecretFile
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = d.MaxMessageSize
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.MaxKnownPeers <= 0 {
		c.MaxKnownPeers = d.MaxKnownPeers
	}
	if c.KnownPeersSaveDelay <= 0 {
		c.KnownPeersSaveDelay = d.KnownPeersSaveDelay
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// parseTCPAddrs parses multiaddrs and rejects anything that is not TCP: the
// private network runs on TCP only (see the package documentation).
func parseTCPAddrs(what string, ss []string) ([]ma.Multiaddr, error) {
	out := make([]ma.Multiaddr, 0, len(ss))
	for _, s := range ss {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("%s address %q: %w", what, s, err)
		}
		if _, err := a.ValueForProtocol(ma.P_TCP); err != nil {
			return nil, fmt.Errorf("%s address %q: not a TCP address (the private network runs on TCP only; go-libp2p does not run QUIC under a pre-shared key)", what, s)
		}
		out = append(out, a)
	}
	return out, nil
}

// KeepAliveInterval is how long a connection may stay silent before its
// multiplexer (yamux) pings the other end: 2 minutes, not yamux's 30 s.
// A voter keeps a connection to every member, a non-voter to every voter
// and a few others (consensus/mesh.go), most of them idle (a non-voter
// talks to the leader and two gossip neighbours), and every ping wakes
// both ends: at 100 peers, with 30 s, each peer took part in
// about 3 pings a second (issue 17). A connection whose other end vanished
// without closing it is noticed later, by the ping or by whoever uses it
// first (Raft, the heartbeats and the requests all have their own
// deadlines).
const KeepAliveInterval = 2 * time.Minute

// MeasureRTTInterval is how often yamux measures a connection's round
// trip (a ping): 30 minutes, not yamux's 30 s. The measure only tunes how
// fast a busy stream's receive window grows, and it is also taken when the
// connection opens; every peer keeps a connection to every member, and
// each side of each one pinged every 30 s: at 100 peers about 7 pings a
// second woke every peer, idle or not (issue 17, docs/BENCHMARKS.md "Idle
// non-voters, session 10"). Every 5 minutes (session 10) a voter, which
// keeps a connection to each of 99 members, still took part in about 0.7
// a second, each a burst of its own (a ping is answered at once, whatever
// the other end is doing); every 30 minutes, 0.1 ("Idle voters' other
// wake-ups, session 12"). A round trip that changed since is then known
// late: a busy stream's window grows a little faster or slower than it
// would, nothing else.
const MeasureRTTInterval = 30 * time.Minute

// muxer is libp2p's yamux with KeepAliveInterval and MeasureRTTInterval
// (a copy: the package's default is shared by every host of the process).
func muxer() *yamux.Transport {
	t := *yamux.DefaultTransport
	t.KeepAliveInterval = KeepAliveInterval
	t.MeasureRTTInterval = MeasureRTTInterval
	return &t
}

// Host is a libp2p host of the private federation. It embeds host.Host, so
// it can be passed wherever a libp2p host is expected.
type Host struct {
	host.Host
	cfg   Config
	log   *slog.Logger
	known *knownPeers
	// key is the identity's private key (LoadOrCreateIdentity), the one
	// that signs this peer's ledger commands (PrivateKey).
	key crypto.PrivKey

	sub event.Subscription
	// saveKick asks saveLoop to write the known peers; done ends it.
	saveKick  chan struct{}
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New starts a host: it loads or creates the identity, loads the secret and
// the known peers (their addresses go into the peerstore, so that they can be
// dialled by ID), and starts listening.
func New(cfg Config) (*Host, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("p2p: DataDir is required")
	}
	cfg = cfg.withDefaults()
	listen, err := parseTCPAddrs("listen", cfg.ListenAddrs)
	if err != nil {
		return nil, fmt.Errorf("p2p: %w", err)
	}
	announce, err := parseTCPAddrs("announce", cfg.AnnounceAddrs)
	if err != nil {
		return nil, fmt.Errorf("p2p: %w", err)
	}
	psk := cfg.Secret
	if psk == nil {
		psk, err = LoadSecretFile(cfg.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("p2p: %w", err)
		}
	}
	if len(psk) != SecretSize {
		return nil, fmt.Errorf("p2p: federation secret has %d bytes, want %d", len(psk), SecretSize)
	}
	priv, err := LoadOrCreateIdentity(filepath.Join(cfg.DataDir, IdentityFile))
	if err != nil {
		return nil, fmt.Errorf("p2p: %w", err)
	}
	self, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("p2p: identity: %w", err)
	}
	known, skipped, err := loadKnownPeers(filepath.Join(cfg.DataDir, KnownPeersFile), self, cfg.MaxKnownPeers)
	if err != nil {
		// The file is a cache: start without it rather than refuse to run,
		// and say so. It is rewritten at the next change.
		cfg.Logger.Warn("p2p: ignoring unreadable known-peers file", "err", err)
		known = &knownPeers{path: filepath.Join(cfg.DataDir, KnownPeersFile), self: self, max: cfg.MaxKnownPeers, peers: map[peer.ID]*KnownPeer{}}
	}
	for _, e := range skipped {
		cfg.Logger.Warn("p2p: skipped known-peers entry", "err", e)
	}

	opts := []libp2p.Option{
		libp2p.Identity(priv),
		libp2p.PrivateNetwork(psk),
		libp2p.ListenAddrs(listen...),
		// TCP only: see the package documentation.
		libp2p.Transport(tcp.NewTCPTransport),
		// Metrics would register in the process-wide Prometheus registry;
		// several hosts in one process (tests, simulations) must not share it.
		libp2p.DisableMetrics(),
		libp2p.Muxer(yamux.ID, muxer()),
	}
	if len(announce) > 0 {
		opts = append(opts, libp2p.AddrsFactory(func([]ma.Multiaddr) []ma.Multiaddr { return announce }))
	}
	if cfg.NATPortMap {
		opts = append(opts, libp2p.NATPortMap())
	}
	if cfg.UserAgent != "" {
		opts = append(opts, libp2p.UserAgent(cfg.UserAgent))
	}
	if cfg.Gater != nil {
		opts = append(opts, libp2p.ConnectionGater(cfg.Gater))
	}
	lh, err := libp2p.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("p2p: start host: %w", err)
	}
	sub, err := lh.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		lh.Close()
		return nil, fmt.Errorf("p2p: subscribe to identify events: %w", err)
	}
	h := &Host{Host: lh, cfg: cfg, log: cfg.Logger, known: known, sub: sub, key: priv,
		saveKick: make(chan struct{}, 1), done: make(chan struct{})}
	if cfg.Gater != nil {
		lh.Network().Notify(&gaterNotifee{g: cfg.Gater})
	}
	for _, p := range known.list() {
		lh.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.PermanentAddrTTL)
	}
	h.wg.Add(2)
	go h.watchIdentify()
	go h.saveLoop()
	return h, nil
}

// saveSoon asks for the known peers to be written (soon, unsynced; see
// saveLoop). It never blocks.
func (h *Host) saveSoon() {
	select {
	case h.saveKick <- struct{}{}:
	default:
	}
}

// knownPeersWriteGap is the least time between two unsynced writes of the
// known peers: the changes of that time are written together at its end.
// While a federation forms, every member learns of every joiner from its
// first announcement, and at one write per change every member rewrote
// the whole file (a new file, written, renamed) once per joiner: about a
// twentieth of the members' CPU per joiner at 50 peers on one host
// (docs/BENCHMARKS.md, "Forming 100 peers, session 11").
const knownPeersWriteGap = 2 * time.Second

// saveLoop writes the known peers at once after a change, without a sync,
// the changes that follow at most once per knownPeersWriteGap, and syncs
// them KnownPeersSaveDelay after the first, once for all the changes of
// that time. The unsynced write is cheap and survives this process being
// killed (a peer killed right after it learned of the other members still
// finds them at its next start, from the first write or from one at most
// knownPeersWriteGap later); the sync, the costly part, is what a forming
// federation would otherwise pay once per joiner on every member.
func (h *Host) saveLoop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.done:
			return
		case <-h.saveKick:
		}
		h.saveKnown(false)
		synced := time.After(h.cfg.KnownPeersSaveDelay)
		wrote := time.Now()
		var gap <-chan time.Time // set while a change waits for its write
	pending:
		for {
			select {
			case <-h.done:
				return // Close writes and syncs them
			case <-h.saveKick:
				if gap == nil {
					gap = time.After(time.Until(wrote.Add(knownPeersWriteGap)))
				}
			case <-gap:
				gap = nil
				h.saveKnown(false)
				wrote = time.Now()
			case <-synced:
				break pending
			}
		}
		h.saveKnown(true)
	}
}

func (h *Host) saveKnown(sync bool) {
	if err := h.known.save(sync); err != nil {
		h.log.Warn("p2p: save known peers", "err", err)
	}
}

// watchIdentify remembers the listen addresses of every peer that completes
// identification. In a private network every such peer holds the secret.
func (h *Host) watchIdentify() {
	defer h.wg.Done()
	for ev := range h.sub.Out() {
		e, ok := ev.(event.EvtPeerIdentificationCompleted)
		if !ok || len(e.ListenAddrs) == 0 {
			continue
		}
		// Keep the addresses beyond the connection's lifetime: Raft dials
		// members by peer ID, possibly long after the last connection.
		h.Peerstore().AddAddrs(e.Peer, e.ListenAddrs, peerstore.PermanentAddrTTL)
		if h.known.observe(e.Peer, e.ListenAddrs, time.Now()) {
			h.saveSoon()
		}
	}
}

// Close stops the host and saves the known peers.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		h.sub.Close()
		close(h.done)
		h.wg.Wait()
		err := h.Host.Close()
		if serr := h.known.save(true); serr != nil && err == nil {
			err = serr
		}
		h.closeErr = err
	})
	return h.closeErr
}

// AgentVersion is what peer id announced as its agent (Config.UserAgent)
// when it last identified itself to this host, "" if it never did in this
// process.
func (h *Host) AgentVersion(id peer.ID) string {
	v, err := h.Peerstore().Get(id, "AgentVersion")
	if err != nil {
		return ""
	}
	s, _ := v.(string)
	return s
}

// Config returns the configuration the host runs with (defaults applied).
func (h *Host) Config() Config { return h.cfg }

// FullAddrs returns this host's advertised addresses with the /p2p/<id>
// suffix: what another peer passes as a bootstrap address.
func (h *Host) FullAddrs() []ma.Multiaddr {
	info := peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}
	out, err := peer.AddrInfoToP2pAddrs(&info)
	if err != nil {
		return nil
	}
	return out
}

// ParseAddr parses a bootstrap multiaddr that ends in /p2p/<peer id>.
func ParseAddr(s string) (peer.AddrInfo, error) {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("address %q: %w", s, err)
	}
	info, err := peer.AddrInfoFromP2pAddr(a)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("address %q: must end in /p2p/<peer id>: %w", s, err)
	}
	return *info, nil
}

// ConnectAddr dials a bootstrap multiaddr (ending in /p2p/<peer id>) and returns
// the peer's ID once the connection (and so the secret) is established.
func (h *Host) ConnectAddr(ctx context.Context, addr string) (peer.ID, error) {
	info, err := ParseAddr(addr)
	if err != nil {
		return "", err
	}
	if info.ID == h.ID() {
		return "", fmt.Errorf("connect %s: that is this host", addr)
	}
	if err := h.Host.Connect(ctx, info); err != nil {
		return "", fmt.Errorf("connect %s: %w", addr, err)
	}
	return info.ID, nil
}

// ConnectKnown dials every remembered peer in parallel and returns how many
// connections succeeded. It is what makes a restart work without a
// bootstrap address.
func (h *Host) ConnectKnown(ctx context.Context) int {
	peers := h.known.list()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		n  int
	)
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.Host.Connect(ctx, peer.AddrInfo{ID: p.ID, Addrs: p.Addrs}); err != nil {
				h.log.Debug("p2p: known peer unreachable", "peer", p.ID, "err", err)
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return n
}

// KnownPeers returns the remembered peers, most recently seen first.
func (h *Host) KnownPeers() []KnownPeer { return h.known.list() }

// Remember records addresses for a peer learnt some other way than a
// connection (for example from a join response), in the peerstore and the
// known-peers file (written at once, synced within KnownPeersSaveDelay or at Close).
func (h *Host) Remember(info peer.AddrInfo) error {
	if info.ID == h.ID() || len(info.Addrs) == 0 {
		return nil
	}
	h.Peerstore().AddAddrs(info.ID, info.Addrs, peerstore.PermanentAddrTTL)
	if h.known.observe(info.ID, info.Addrs, time.Now()) {
		h.saveSoon()
	}
	return nil
}

// Forget drops a peer from the known-peers file (for a peer that left the
// federation for good), written at once, synced within KnownPeersSaveDelay or at Close.
func (h *Host) Forget(id peer.ID) error {
	if h.known.forget(id) {
		h.saveSoon()
	}
	return nil
}

// StreamOptions returns the request/response limits from the host's config.
func (h *Host) StreamOptions() StreamOptions {
	return StreamOptions{MaxMessageSize: h.cfg.MaxMessageSize, Timeout: h.cfg.RequestTimeout, Logger: h.log}
}

// Handle registers fn for proto with the host's limits.
func (h *Host) Handle(proto protocol.ID, fn HandlerFunc) {
	Handle(h.Host, proto, fn, h.StreamOptions())
}

// Request sends req to p on proto with the host's limits.
func (h *Host) Request(ctx context.Context, p peer.ID, proto protocol.ID, req []byte) ([]byte, error) {
	return Request(ctx, h.Host, p, proto, req, h.StreamOptions())
}

var _ host.Host = (*Host)(nil)
