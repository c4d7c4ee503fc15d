package api

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo says which build of the peer answers: GET /v1/status's
// "build", `peer version`, and the coopgrid_build_info metric's labels.
type BuildInfo struct {
	// Version is the release (`git describe` in the Makefile's build),
	// else the module version Go stamped, else "dev".
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, "" if unknown;
	// CommitTime its time (RFC 3339) and Modified set when the work tree
	// had uncommitted changes.
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	GoVersion  string `json:"go_version"`
	Platform   string `json:"platform"` // GOOS/GOARCH
}

// ReadBuild describes the running binary. version and commit are what the
// linker set (-ldflags "-X main.version=… -X main.commit=…", the Makefile's
// build target); empty ones are taken from what the Go toolchain stamped
// into the binary (runtime/debug.ReadBuildInfo: the module version and the
// vcs.* settings of a build inside a git checkout), so that a plain
// `go build` still names its commit.
func ReadBuild(version, commit string) BuildInfo {
	b := BuildInfo{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
		stamped := ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				stamped = s.Value
			case "vcs.time":
				b.CommitTime = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
		switch {
		case b.Commit == "":
			b.Commit = stamped
		case stamped != "" && stamped != b.Commit:
			// The linker's commit is not the one Go saw: the stamped
			// time and state belong to another commit.
			b.CommitTime, b.Modified = "", false
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

// buildInfoGauge is coopgrid_build_info: always 1, the build in its labels
// (the Prometheus convention for joining a version onto other series).
func buildInfoGauge(b BuildInfo) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "coopgrid_build_info",
		Help: "Always 1; the labels name the peer's build (version, commit, Go version).",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}
