package consensus

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	libp2praft "github.com/libp2p/go-libp2p-raft"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// noPipeline is the Raft transport with pipelined replication turned off:
// the leader sends a follower one AppendEntries at a time. hashicorp/raft
// v1.7.3's pipeline can deadlock the leader's replication to a follower
// that answers Success=false while another request is in flight (its
// decoder exits, the send loop then parks on the pipeline's unbuffered
// in-flight channel, and the deferred Close that would free it never
// runs); heartbeats keep flowing, so the follower never times out and
// never receives another entry until the leader restarts
// (hashicorp/raft#612). The chaos harness's full disk hit it in about
// one run in three: a follower whose store refused writes stayed behind
// forever after the space came back. go-libp2p-raft builds the
// NetworkTransport without a way to set MaxRPCsInFlight (1 would turn
// pipelining off too), hence the wrapper; HashiCorp measured pipelining
// to bring nothing on low-latency networks (hashicorp/raft#541).
type noPipeline struct{ *raft.NetworkTransport }

// AppendEntriesPipeline tells Raft to replicate without a pipeline.
func (noPipeline) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// Raft RPC type bytes of hashicorp/raft's NetworkTransport wire format (its
// unexported rpcAppendEntries ... rpcRequestPreVote): each RPC is one type
// byte and a msgpack request; InstallSnapshot is followed by Size bytes of
// snapshot.
const (
	rpcAppendEntries uint8 = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote
)

var rpcNames = [...]string{"AppendEntries", "RequestVote", "InstallSnapshot", "TimeoutNow", "RequestPreVote"}

// newTransport is go-libp2p-raft's NewLibp2pTransport (same protocol ID,
// server addresses that are peer IDs) with a stream layer whose every
// accepted RPC passes the membership gate first, and with a pool of
// streams.
func newTransport(h host.Host, g *gate, timeout time.Duration) (*raft.NetworkTransport, error) {
	sl := newGatedStreams(h, g)
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		ServerAddressProvider: peerIDAddrs{},
		Logger:                &libp2praft.HcLogToLogger{},
		Stream:                sl,
		// A stream per RPC is not cheap: the NetworkTransport gives every
		// new connection a 256 KiB write buffer, and the receiving side a
		// 256 KiB read buffer (and gatedConn another), so at LAN timing
		// (about 50 RPCs a second to each follower, most of them empty)
		// the leader spent a third of a core of ten peers allocating and
		// collecting them (make bench-idle, docs/BENCHMARKS.md). Pooled
		// streams stay open: the gate still checks every RPC read from one
		// (gatedConn). Two per follower: the heartbeat and the replication
		// loop each hold one at a time.
		MaxPool: 2,
		Timeout: timeout,
	}), nil
}

// peerIDAddrs makes a server's address its ID, a peer ID libp2p can dial.
type peerIDAddrs struct{}

func (peerIDAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	return raft.ServerAddress(id), nil
}

// gatedStreams is the raft.StreamLayer over libp2p streams of
// libp2praft.RaftProtocol. An inbound stream from a sender the gate refuses
// is reset before Raft sees it; an admitted one is wrapped so that every
// RPC read from it is checked again (gatedConn), because the configuration
// can change while a stream stays open.
type gatedStreams struct {
	h      host.Host
	g      *gate
	accept chan network.Stream
	closed chan struct{}
	once   sync.Once
}

func newGatedStreams(h host.Host, g *gate) *gatedStreams {
	s := &gatedStreams{h: h, g: g, accept: make(chan network.Stream), closed: make(chan struct{})}
	h.SetStreamHandler(libp2praft.RaftProtocol, s.handle)
	return s
}

func (s *gatedStreams) handle(st network.Stream) {
	from := st.Conn().RemotePeer()
	if !s.g.allows(from) {
		s.g.refuse(from, "stream")
		_ = st.Reset()
		return
	}
	select {
	case s.accept <- st:
	case <-s.closed:
		_ = st.Reset()
	}
}

// Accept returns the next admitted inbound stream as a net.Conn.
func (s *gatedStreams) Accept() (net.Conn, error) {
	select {
	case st := <-s.accept:
		return newGatedConn(st, s.g), nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Dial opens a stream to the peer whose ID is address.
func (s *gatedStreams) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id, err := peer.Decode(string(address))
	if err != nil {
		return nil, fmt.Errorf("raft address %q: %w", address, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := s.h.NewStream(ctx, id, libp2praft.RaftProtocol)
	if err != nil {
		return nil, err
	}
	return streamConn{st}, nil
}

func (s *gatedStreams) Addr() net.Addr { return peerAddr(s.h.ID()) }

func (s *gatedStreams) Close() error {
	s.once.Do(func() {
		s.h.RemoveStreamHandler(libp2praft.RaftProtocol)
		close(s.closed)
	})
	return nil
}

// peerAddr is a peer ID as a net.Addr.
type peerAddr peer.ID

func (peerAddr) Network() string  { return "libp2p" }
func (a peerAddr) String() string { return peer.ID(a).String() }

// streamConn is a libp2p stream as a net.Conn.
type streamConn struct{ network.Stream }

func (c streamConn) LocalAddr() net.Addr  { return peerAddr(c.Conn().LocalPeer()) }
func (c streamConn) RemoteAddr() net.Addr { return peerAddr(c.Conn().RemotePeer()) }

// gatedConn is an inbound Raft stream that hands the NetworkTransport one
// RPC at a time, and only once the gate admitted its sender for that RPC.
// It decodes each request as the NetworkTransport will (type byte, msgpack,
// and for InstallSnapshot the snapshot bytes after it), asks the gate, and
// checks that the request's header names its sender (the header is what
// Raft believes, the stream's peer what libp2p authenticated). It passes on
// the request's exact bytes. A refused RPC closes the stream: Raft never
// sees it, the sender's call fails.
type gatedConn struct {
	streamConn
	g    *gate
	from peer.ID
	r    *bufio.Reader
	dec  *codec.Decoder
	rec  recorder
	// pending are the bytes of the admitted RPC not yet read; snapshot
	// the snapshot bytes still to pass through after them.
	pending  []byte
	snapshot int64
}

// rpcReadBuffer is the read buffer of an inbound Raft stream, the
// NetworkTransport's own size.
const rpcReadBuffer = 256 << 10

func newGatedConn(st network.Stream, g *gate) *gatedConn {
	c := &gatedConn{streamConn: streamConn{st}, g: g, from: st.Conn().RemotePeer(), r: bufio.NewReaderSize(st, rpcReadBuffer)}
	c.rec.r = c.r
	c.dec = codec.NewDecoder(&c.rec, &codec.MsgpackHandle{})
	return c
}

func (c *gatedConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 && c.snapshot == 0 {
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	if int64(len(p)) > c.snapshot {
		p = p[:c.snapshot]
	}
	n, err := c.r.Read(p)
	c.snapshot -= int64(n)
	return n, err
}

// next reads, checks and stages the next RPC. A refusal is reported to the
// NetworkTransport as the end of the stream (which it closes quietly) and
// the stream is reset.
func (c *gatedConn) next() error {
	c.rec.buf = c.rec.buf[:0]
	typ, err := c.rec.ReadByte()
	if err != nil {
		return err
	}
	name := "unknown"
	if int(typ) < len(rpcNames) {
		name = rpcNames[typ]
	}
	// The gate is asked before the request is decoded: a refused sender
	// costs no decoding.
	if !c.g.allows(c.from) {
		c.g.refuse(c.from, name)
		return c.refused()
	}
	var (
		hdr      raft.RPCHeader
		leader   []byte
		snapshot int64
	)
	switch typ {
	case rpcAppendEntries:
		var req appendEntriesSender
		err = c.dec.Decode(&req)
		hdr, leader = req.RPCHeader, req.Leader
	case rpcRequestVote:
		var req raft.RequestVoteRequest
		err = c.dec.Decode(&req)
		hdr = req.RPCHeader
	case rpcRequestPreVote:
		var req raft.RequestPreVoteRequest
		err = c.dec.Decode(&req)
		hdr = req.RPCHeader
	case rpcInstallSnapshot:
		var req raft.InstallSnapshotRequest
		err = c.dec.Decode(&req)
		hdr, snapshot = req.RPCHeader, req.Size
	case rpcTimeoutNow:
		var req raft.TimeoutNowRequest
		err = c.dec.Decode(&req)
		hdr = req.RPCHeader
	default:
		err = fmt.Errorf("unknown rpc type %d", typ)
	}
	if err != nil {
		_ = c.Stream.Reset()
		return fmt.Errorf("decode raft rpc from %s: %w", c.from, err)
	}
	if !c.names(hdr.ID, true) || !c.names(hdr.Addr, false) || !c.names(leader, false) || snapshot < 0 {
		c.g.refuse(c.from, name+" naming another sender")
		return c.refused()
	}
	c.pending = c.rec.buf
	c.snapshot = snapshot
	return nil
}

// appendEntriesSender is what the gate reads of an AppendEntries: the
// fields naming its sender. The decoder walks over the others (the
// entries above all) without building them: the NetworkTransport decodes
// the request again from the same bytes, so decoding the entries here
// too cost every follower a second copy of every entry.
type appendEntriesSender struct {
	raft.RPCHeader
	// Leader is raft's deprecated leader address, still read by Raft.
	Leader []byte
}

// names says whether a sender identity the request carries is its
// authenticated sender (an empty one passes unless required).
func (c *gatedConn) names(id []byte, required bool) bool {
	if len(id) == 0 {
		return !required
	}
	return string(id) == c.from.String()
}

func (c *gatedConn) refused() error {
	_ = c.Stream.Reset()
	return io.EOF
}

// recorder reads through r and keeps what it read (what the decoder
// consumed: it unreads at most the last byte, as it does on the
// NetworkTransport's bufio.Reader).
type recorder struct {
	r   *bufio.Reader
	buf []byte
}

func (d *recorder) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.buf = append(d.buf, p[:n]...)
	return n, err
}

func (d *recorder) ReadByte() (byte, error) {
	b, err := d.r.ReadByte()
	if err == nil {
		d.buf = append(d.buf, b)
	}
	return b, err
}

func (d *recorder) UnreadByte() error {
	if err := d.r.UnreadByte(); err != nil {
		return err
	}
	d.buf = d.buf[:len(d.buf)-1]
	return nil
}
