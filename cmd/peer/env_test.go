package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/config"
)

// deadAddr is a loopback address nothing listens on (a port just freed).
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestEnvironment: COOPGRID_DATA and COOPGRID_API stand for --data and
// --api; a flag given wins over its variable, and the variable wins over
// DATA/config.yaml's api key.
func TestEnvironment(t *testing.T) {
	_, data := fixture(t)
	live := func() string {
		raw, err := os.ReadFile(filepath.Join(data, configFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(l, "api: "); ok {
				return v
			}
		}
		t.Fatal("no api in the fixture's config.yaml")
		return ""
	}()
	// A data directory with the right token whose config.yaml names a
	// dead address: only an API address from elsewhere reaches the peer.
	stale := dataDir(t, cliToken, deadAddr(t))
	empty := t.TempDir()

	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		code    int
		stdout  string // a line of the answer, when it succeeds
		stderrs string
	}{
		{name: "data from the environment", env: map[string]string{envData: data}, args: []string{"orgs"}, stdout: "alpha "},
		{name: "--data wins", env: map[string]string{envData: empty}, args: []string{"orgs", "--data", data}, stdout: "alpha "},
		{name: "the environment's data is used", env: map[string]string{envData: empty}, args: []string{"orgs"}, code: 2, stderrs: filepath.Join(empty, "api.token")},
		{name: "api from the environment beats config.yaml", env: map[string]string{envData: stale, envAPI: live}, args: []string{"orgs"}, stdout: "alpha "},
		{name: "--api wins", env: map[string]string{envData: data, envAPI: deadAddr(t)}, args: []string{"orgs", "--api", live}, stdout: "alpha "},
		{name: "the environment's api is used", env: map[string]string{envData: data, envAPI: deadAddr(t)}, args: []string{"orgs"}, code: 1, stderrs: "cannot reach the peer's API"},
		{name: "an empty variable is unset", env: map[string]string{envData: "", envAPI: ""}, args: []string{"orgs"}, code: 2, stderrs: "or set COOPGRID_DATA"},
		{name: "verify takes the data directory", env: map[string]string{envData: empty}, args: []string{"verify"}, code: 1, stderrs: filepath.Join(empty, "raft")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, out, errs := runCLI(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, out, errs)
			}
			if tc.stdout != "" && !strings.Contains(out, "\n"+tc.stdout) {
				t.Fatalf("stdout lacks a line %q:\n%s", tc.stdout, out)
			}
			if !strings.Contains(errs, tc.stderrs) {
				t.Fatalf("stderr %q lacks %q", errs, tc.stderrs)
			}
		})
	}

	t.Run("init and run take both", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "x")
		t.Setenv(envData, dir)
		t.Setenv(envAPI, "127.0.0.1:9771")
		if code, _, errs := runCLI(t, "init", "--org", "uni-x", "--new-federation"); code != 0 {
			t.Fatalf("init: exit %d: %s", code, errs)
		}
		cfg, err := config.Load(filepath.Join(dir, configFile))
		if err != nil || cfg.Org != "uni-x" || cfg.API != "127.0.0.1:9771" {
			t.Fatalf("config %+v, %v", cfg, err)
		}
	})
	t.Run("help names the variables", func(t *testing.T) {
		_, out, _ := runCLI(t, "tasks", "--help")
		if !strings.Contains(out, "[$COOPGRID_DATA]") || !strings.Contains(out, "[$COOPGRID_API]") {
			t.Fatalf("help:\n%s", out)
		}
	})
}
