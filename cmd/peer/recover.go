package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/node"
)

func newRecoverCmd() *cobra.Command {
	var (
		data   string
		dryRun bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "recover --data DIR PEER_ID... | --data DIR --dry-run",
		Short: "Restart a federation that lost its majority for good, from the surviving peers' data",
		Long: `Rewrite a stopped peer's Raft state so that the federation's members are
exactly the PEER_IDs given (the survivors, this peer included), all voters:
hashicorp/raft's RecoverCluster, the way Consul applies a peers.json. Use it
only when a majority of the voters is lost for good; a federation that still
has one removes dead members by itself (peer members).

On EVERY survivor, with the same list:
  1. stop the peer;
  2. peer recover --data DIR --dry-run   prints the members its data knows and
     its last entry (index, term): keep the data of every survivor;
  3. peer recover --data DIR ID1 ID2 …   rewrites it (the last entry, the state
     hash and the new members are printed: compare them across survivors);
  4. start the peer again (peer run). The survivors elect a leader among
     themselves; the one with the newest log leads and brings the others to it.

An entry that only the lost peers had received is lost. The lost peers must
never be started again with their old data directory (with the old members
they could elect a second leader): give each a fresh one (peer init) and a
new invitation. Steps and caveats: docs/OPERATIONS.md, "Recovery".`,
		Example: `  peer recover --data /var/lib/coopgrid --dry-run
  peer recover --data /var/lib/coopgrid 12D3KooWA… 12D3KooWB…`,
		Args: usageArgs(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if data == "" {
				return usageErr("--data is required (or set " + envData + ")")
			}
			if dryRun != (len(args) == 0) {
				return usageErr("name the surviving peers' IDs (this one included), or give --dry-run alone")
			}
			res, err := node.Recover(data, args, dryRun, nil)
			if err != nil {
				return inputExit(err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			printRecover(cmd.OutOrStdout(), res, dryRun)
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	cmd.Flags().StringVar(&data, "data", "", "the stopped peer's data directory (required)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the members and the last entry the data holds; change nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func printRecover(w io.Writer, r node.RecoverResult, dryRun bool) {
	fmt.Fprintf(w, "peer %s\n", r.Self)
	fmt.Fprintf(w, "members in the data (%d):\n", len(r.Before))
	for _, m := range r.Before {
		suffrage := "nonvoter"
		if m.Voter {
			suffrage = "voter"
		}
		fmt.Fprintf(w, "  %s %s\n", m.ID, suffrage)
	}
	if dryRun {
		fmt.Fprintf(w, "last entry: index %d, term %d (nothing changed)\n", r.LastIndex, r.LastTerm)
		return
	}
	fmt.Fprintf(w, "recovered at index %d, term %d, state hash %s\n", r.LastIndex, r.LastTerm, r.Hash)
	fmt.Fprintf(w, "members now (%d, all voters): %s\n", len(r.After), strings.Join(r.After, " "))
	fmt.Fprintln(w, "start the peer again (peer run); do the same on every survivor with the same list")
}

// inputExit makes a bad input (config.InputError: a file's line and
// field, a bad argument) exit with status 2, like a usage error.
func inputExit(err error) error {
	var bad *config.InputError
	if errors.As(err, &bad) {
		return &exitError{code: 2, err: err}
	}
	return err
}
