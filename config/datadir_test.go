package config

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/p2p"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInit(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	machines := writeFile(t, src, "m.yaml", "machines:\n  - name: fast\n    gflops: 50\n    busy_watts: 120\n    idle_watts: 20\n  - name: measured\n    busy_watts: 80\npolicy:\n  allow: [/bin/sh, python3]\n  kill_grace: 3s\n  max_output_files: 7\n")
	dir := filepath.Join(t.TempDir(), "peer-a")
	res, err := Init(ctx, InitOptions{DataDir: dir, Org: "uni-a", MachinesFile: machines, NewFederation: true, MeasureFor: 20 * time.Millisecond, API: "127.0.0.1:9500"})
	if err != nil {
		t.Fatal(err)
	}
	if res.PeerID == "" || !res.NewFederation || len(res.Machines) != 2 {
		t.Fatalf("result %+v", res)
	}
	if m := res.Machines[1]; m.Name != "measured" || !m.Measured || m.GFLOPS <= 0 || res.Machines[0].Measured || res.Machines[0].GFLOPS != 50 {
		t.Fatalf("machines %+v", res.Machines)
	}
	for _, f := range []string{"identity.key", "federation.key", TokenFile, ConfigFile, MachinesFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", f, fi.Mode().Perm())
		}
	}
	cfg, err := Load(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Org != "uni-a" || !cfg.NewFederation || cfg.API != "127.0.0.1:9500" || cfg.Machines != MachinesFile {
		t.Fatalf("config %+v", cfg)
	}
	tok, _ := os.ReadFile(res.TokenFile)
	if len(strings.TrimSpace(string(tok))) != 64 {
		t.Fatalf("token %q", tok)
	}
	// The machines file written back keeps the policy and the measured
	// figure.
	written, err := os.ReadFile(res.MachinesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(written, []byte("kill_grace: 3s")) || !bytes.Contains(written, []byte("- python3")) || bytes.Count(written, []byte("gflops:")) != 2 {
		t.Fatalf("machines file:\n%s", written)
	}

	t.Run("refuses an initialised directory", func(t *testing.T) {
		before, _ := os.ReadFile(filepath.Join(dir, "identity.key"))
		_, err := Init(ctx, InitOptions{DataDir: dir, Org: "uni-z", NewFederation: true})
		if !errors.Is(err, ErrInitialised) {
			t.Fatalf("second init: %v", err)
		}
		after, _ := os.ReadFile(filepath.Join(dir, "identity.key"))
		if !bytes.Equal(before, after) {
			t.Fatal("the identity changed")
		}
	})

	t.Run("copies a given secret", func(t *testing.T) {
		dir2 := filepath.Join(t.TempDir(), "peer-b")
		res2, err := Init(ctx, InitOptions{DataDir: dir2, Org: "uni-b", SecretFile: res.SecretFile})
		if err != nil {
			t.Fatal(err)
		}
		a, err := p2p.LoadSecretFile(res.SecretFile)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p2p.LoadSecretFile(res2.SecretFile)
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("secret not copied: %v", err)
		}
		if res2.PeerID == res.PeerID || res2.NewFederation || res2.MachinesFile != "" {
			t.Fatalf("result %+v", res2)
		}
	})

	bad := []struct {
		name string
		o    InitOptions
		want string
	}{
		{"neither", InitOptions{Org: "x"}, "exactly one of"},
		{"both", InitOptions{Org: "x", NewFederation: true, SecretFile: res.SecretFile}, "exactly one of"},
		{"bad org", InitOptions{Org: "a/b", NewFederation: true}, "organisation \"a/b\""},
		{"missing secret", InitOptions{Org: "x", SecretFile: filepath.Join(src, "nope")}, "federation secret"},
		{"not a secret", InitOptions{Org: "x", SecretFile: machines}, "not a PSK v1 file"},
		{"bad machines", InitOptions{Org: "x", NewFederation: true, MachinesFile: writeFile(t, src, "bad.yaml", "machines:\n  - name: m\n    busy_watts: -3\n")}, "bad.yaml:3: machines[0].busy_watts"},
		{"missing machines", InitOptions{Org: "x", NewFederation: true, MachinesFile: filepath.Join(src, "none.yaml")}, "machines file"},
		{"bad listen", InitOptions{Org: "x", NewFederation: true, Listen: []string{"/ip4/1.2.3.4/udp/1"}}, "listen[0]"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.DataDir = filepath.Join(t.TempDir(), "new")
			_, err := Init(ctx, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(tc.o.DataDir); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a failed init left %s behind (%v)", tc.o.DataDir, err)
			}
		})
	}
}

// TestExampleMachinesFiles: the machines files of examples/machines parse.
func TestExampleMachinesFiles(t *testing.T) {
	files, err := filepath.Glob("../examples/machines/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example machines files (%v)", err)
	}
	for _, f := range files {
		mf, err := executor.LoadMachinesFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := encodeMachinesFile(mf); err != nil {
			t.Errorf("%s does not survive peer init's rewrite: %v", f, err)
		}
	}
}

// TestExampleMachinesFilesProtect: every example that allows something
// keeps tasks away from the peer's user, so a peer started with it as
// shipped does not refuse to run (nor run tasks as itself).
func TestExampleMachinesFilesProtect(t *testing.T) {
	files, _ := filepath.Glob("../examples/machines/*.yaml")
	for _, f := range files {
		mf, err := executor.LoadMachinesFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i := range mf.Machines {
			if mf.Machines[i].GFLOPS == 0 {
				mf.Machines[i].GFLOPS = 1 // peer init measures it
			}
		}
		e, err := executor.NewProcessExecutor(executor.ProcessConfig{TasksDir: filepath.Join(t.TempDir(), "tasks"), Machines: mf.Machines, Policy: mf.Policy, DisableRAPL: true})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		_ = e.Close(t.Context())
		if mf.Policy.UnsafeRunAsPeerUser {
			t.Errorf("%s opts in to running tasks as the peer", f)
		}
	}
}
