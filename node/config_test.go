package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/config"
)

func TestStartErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, Options{DataDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "peer init") {
		t.Fatalf("start of an empty directory: %v", err)
	}
	tn := newTNode(t, "s-a", "", "", testConfig("sim"))
	if _, err := Start(ctx, Options{DataDir: tn.dir, Bootstrap: []string{"/ip4/1.2.3.4/tcp/1"}}); err == nil || !strings.HasPrefix(err.Error(), "--bootstrap") {
		t.Fatalf("a bootstrap address without /p2p/: %v", err)
	}
	if _, err := Start(ctx, Options{DataDir: tn.dir, Listen: []string{"/ip4/1.2.3.4/udp/1"}}); err == nil || !strings.HasPrefix(err.Error(), "--listen") {
		t.Fatalf("a UDP listen address: %v", err)
	}
	if err := os.WriteFile(filepath.Join(tn.dir, config.ConfigFile), []byte("org: s-a\nheartbeat:\n  timeout: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(ctx, Options{DataDir: tn.dir})
	if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(tn.dir, config.ConfigFile)+":3: heartbeat.timeout:") {
		t.Fatalf("start with a bad config: %v", err)
	}
}
