package p2p

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRequestPerStream and BenchmarkRequestOnSession compare one
// small exchange on a new stream each time (Request) with one on a
// long-lived stream (Session), over real hosts on loopback: what a
// leader and a member pay per direct heartbeat (docs/BENCHMARKS.md).
func BenchmarkRequestPerStream(b *testing.B) {
	psk, _ := GenerateSecret()
	srv, cli := benchPair(b, psk)
	ctx := context.Background()
	req := make([]byte, 300)
	b.ResetTimer()
	for range b.N {
		if _, err := Request(ctx, cli.Host, srv.ID(), echoProto, req, StreamOptions{Timeout: 10 * time.Second}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRequestOnSession(b *testing.B) {
	psk, _ := GenerateSecret()
	srv, cli := benchPair(b, psk)
	c := NewSession(cli.Host, sessionProto, "", StreamOptions{Timeout: 10 * time.Second})
	defer c.Close()
	ctx := context.Background()
	req := make([]byte, 300)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Request(ctx, srv.ID(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func benchPair(b *testing.B, psk []byte) (srv, cli *Host) {
	b.Helper()
	mk := func() *Host {
		h, err := New(Config{DataDir: b.TempDir(), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Secret: psk, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.Close() })
		return h
	}
	srv, cli = mk(), mk()
	Handle(srv.Host, echoProto, echoHandler, StreamOptions{Logger: quietLogger()})
	HandleSession(srv.Host, sessionProto, echoHandler, SessionOptions{StreamOptions: StreamOptions{Logger: quietLogger()}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addrs := srv.FullAddrs()
	if _, err := cli.ConnectAddr(ctx, addrs[0].String()); err != nil {
		b.Fatal(err)
	}
	return srv, cli
}
