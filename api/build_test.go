package api_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/coopgrid/coopgrid/api"
)

// TestBuildInfo: the build the server was given is in GET /v1/status and in
// the coopgrid_build_info metric's labels; a server given none names the
// running binary (ReadBuild: "dev" and the Go version in a test binary,
// which Go does not stamp).
func TestBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  api.BuildInfo
		want api.BuildInfo
	}{
		{
			name: "given",
			opt:  api.BuildInfo{Version: "v1.2.3", Commit: "0123456789abcdef", GoVersion: "go1.99", Platform: "plan9/mips"},
			want: api.BuildInfo{Version: "v1.2.3", Commit: "0123456789abcdef", GoVersion: "go1.99", Platform: "plan9/mips"},
		},
		{
			name: "default",
			want: api.ReadBuild("", ""),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := serve(t, api.ServerOptions{Build: tc.opt})
			c := api.NewClient(srv.URL, token, srv.Client())
			st, err := c.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Build == nil || *st.Build != tc.want {
				t.Fatalf("status build = %+v, want %+v", st.Build, tc.want)
			}
			if st.Build.Version == "" || st.Build.GoVersion == "" {
				t.Fatalf("build %+v: version and Go version must be set", st.Build)
			}
			vals, _ := scrapeMetrics(t, c)
			key := "coopgrid_build_info{commit=" + tc.want.Commit + ",goversion=" + tc.want.GoVersion + ",version=" + tc.want.Version + "}"
			if vals[key] != 1 {
				t.Fatalf("%s = %v (missing?); scrape: %v", key, vals[key], vals)
			}
		})
	}
}

// TestReadBuild: the linker's values win; without them a test binary (no
// VCS stamp) is "dev" with the running toolchain.
func TestReadBuild(t *testing.T) {
	b := api.ReadBuild("v9.8.7", "feedface")
	if b.Version != "v9.8.7" || b.Commit != "feedface" || b.GoVersion == "" || b.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("ReadBuild with linker values: %+v", b)
	}
	if d := api.ReadBuild("", ""); d.Version == "" || d.GoVersion == "" {
		t.Fatalf("ReadBuild without linker values: %+v", d)
	}
}
