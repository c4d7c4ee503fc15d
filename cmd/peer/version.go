package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
)

// version and commit are set by the linker (the Makefile's build target:
// -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)"). Left
// empty, api.ReadBuild takes what the Go toolchain stamped into the binary.
var (
	version string
	commit  string
)

// buildInfo describes this binary.
func buildInfo() api.BuildInfo { return api.ReadBuild(version, commit) }

// versionLine is the one-line form: `peer --version` and `peer version`.
func versionLine(b api.BuildInfo) string {
	s := b.Version
	if b.Commit != "" {
		c := b.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (commit " + c
		if b.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s + ", " + b.GoVersion + " " + b.Platform
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version, commit and Go version",
		Long: `Print the version of this peer binary: the release the Makefile's build
stamped (git describe), the commit it was built from (also when built with a
plain go build inside a git checkout), whether the work tree had changes,
and the Go toolchain. A running peer reports its own in peer status and as
the coopgrid_build_info metric.

--json prints {"version","commit","commit_time","modified","go_version","platform"}.`,
		Example: `  peer version
  peer version --json | jq -r .commit`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := buildInfo()
			if asJSON {
				return printJSON(cmd.OutOrStdout(), b)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "peer", versionLine(b))
			return err
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
