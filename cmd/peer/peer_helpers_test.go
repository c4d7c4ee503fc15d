package main

import (
	"context"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/node/nodetest"
)

// startPeer starts a real single-peer federation (nodetest.Start) for a
// test that drives the CLI against it, and skips the test under -short.
// The context it returns bounds the test to 90 s and ends with it, after
// the peer stopped.
func startPeer(t *testing.T) (context.Context, *nodetest.Peer) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real peer and runs real processes (a few seconds)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx, nodetest.Start(ctx, t)
}
