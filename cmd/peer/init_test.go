package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/config"
)

func TestInitCommand(t *testing.T) {
	tmp := t.TempDir()
	machines := filepath.Join(tmp, "machines.yaml")
	if err := os.WriteFile(machines, []byte("machines:\n  - name: m1\n    busy_watts: 90\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(tmp, "a")
	code, out, errs := runCLI(t, "init", "--org", "uni-a", "--data", a, "--machines", machines, "--new-federation", "--measure", "20ms")
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errs)
	}
	secret := filepath.Join(a, "federation.key")
	for _, want := range []string{"Initialised organisation uni-a", "m1: ", "(measured)", secret, "out of\nband", "peer run --data " + a} {
		if !strings.Contains(out, want) {
			t.Fatalf("init output lacks %q:\n%s", want, out)
		}
	}

	// A second institution joins with a copy of the secret; --json.
	b := filepath.Join(tmp, "b")
	code, out, errs = runCLI(t, "init", "--org", "uni-b", "--data", b, "--secret", secret, "--json", "--listen", "/ip4/127.0.0.1/tcp/9999", "--api", "127.0.0.1:9998")
	if code != 0 {
		t.Fatalf("init --secret: exit %d: %s", code, errs)
	}
	var res config.InitResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if res.Org != "uni-b" || res.NewFederation || res.PeerID == "" || len(res.Machines) != 0 {
		t.Fatalf("result %+v", res)
	}
	cfg, err := config.Load(res.ConfigFile)
	if err != nil || cfg.API != "127.0.0.1:9998" || cfg.Listen[0] != "/ip4/127.0.0.1/tcp/9999" || cfg.NewFederation {
		t.Fatalf("config %+v %v", cfg, err)
	}

	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"initialised directory", []string{"--org", "uni-z", "--data", a, "--new-federation"}, 1, "already initialised"},
		{"no org", []string{"--data", filepath.Join(tmp, "x"), "--new-federation"}, 2, "--org is required"},
		{"no data", []string{"--org", "x", "--new-federation"}, 2, "--data is required"},
		{"neither", []string{"--org", "x", "--data", filepath.Join(tmp, "x")}, 2, "exactly one of"},
		{"both", []string{"--org", "x", "--data", filepath.Join(tmp, "x"), "--new-federation", "--secret", secret}, 2, "exactly one of"},
		{"bad org", []string{"--org", "a b", "--data", filepath.Join(tmp, "x"), "--new-federation"}, 2, "organisation \"a b\""},
		{"bad secret", []string{"--org", "x", "--data", filepath.Join(tmp, "x"), "--secret", machines}, 2, "not a PSK v1 file"},
		{"unknown flag", []string{"--org", "x", "--colour"}, 2, "unknown flag"},
		{"argument", []string{"extra"}, 2, "unknown command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runCLI(t, append([]string{"init"}, tc.args...)...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errs, tc.code, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(tmp, "x")); !os.IsNotExist(err) {
		t.Fatalf("a refused init created its directory: %v", err)
	}
}
