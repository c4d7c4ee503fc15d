package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/internal/audit"
)

// exitViolation is verify's exit code when the history breaks an
// invariant (1 is for a verification that could not run).
const exitViolation = 3

func newVerifyCmd() *cobra.Command {
	var (
		data   string
		upTo   uint64
		expect string
		asJSON bool
		every  int
	)
	cmd := &cobra.Command{
		Use:   "verify --data DIR [--upto INDEX] [--expect-hash HASH]",
		Short: "Replay a stopped peer's Raft log and check the ledger's invariants after every entry",
		Long: `Replay the Raft log of a stopped peer through the ledger (the code every peer
applies committed entries with) and check the ledger's invariants after every
entry: PI ≤ limit for every organisation, energy credited to users = to owners
= the sums over the recorded segments, one task per machine, consistent task
states. The replay starts from the empty ledger when the log is complete, or
from the oldest snapshot the log continues; every snapshot on disk is checked
(CRC, recorded hash, invariants) and compared with the replay at its index.

The Raft log and snapshots are opened read-only. The peer must be stopped
(a running peer holds raft.db's lock).

hashicorp/raft does not persist the commit index, so the end of a log may
hold entries that were never committed. --upto INDEX stops the replay at an
index known to be committed, e.g. the applied index peer status (or
GET /v1/ledger) reported before the peer was stopped; --expect-hash then
checks the state hash there (use it to compare peers).

One check costs time proportional to the state's size. By default the checks
are paced so that the replay stays linear in the log: a check runs once the
commands since the previous one reach the state's size / 64 (after every
command while the state holds at most 64 records), so a violation in a large
state is reported at the next check with the range of entries that may have
caused it. --check-every N checks after every N-th command instead; 1 checks
after each one (exact index, time quadratic in a long history).

Exit status: 0 when every check holds, 3 on a violation (the first one is
reported with its index), 1 when the verification could not run, 2 on bad
usage. --json prints the whole report.`,
		Example: `  peer verify --data /var/lib/coopgrid
  peer verify --data /var/lib/coopgrid --upto 48211 --expect-hash 9f86d081… --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if data == "" {
				return usageErr("--data is required (or set " + envData + ")")
			}
			if expect != "" && upTo == 0 {
				return usageErr("--expect-hash needs --upto: a hash is only meaningful at a committed index")
			}
			if every < 0 {
				return usageErr("--check-every %d: want 1 or more (0: paced by the state's size)", every)
			}
			rep, err := audit.VerifyDataDir(cmd.Context(), data, audit.Options{UpTo: upTo, CheckEvery: every, Paced: every == 0})
			if err != nil {
				return err
			}
			var mismatch error
			if rep.OK() && expect != "" && (rep.Index != upTo || rep.Hash != expect) {
				mismatch = fmt.Errorf("at index %d the replay's state hash is %s, expected %s at %d", rep.Index, rep.Hash, expect, upTo)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := printJSON(out, rep); err != nil {
					return err
				}
			} else {
				printReport(out, rep)
			}
			switch {
			case !rep.OK():
				return &exitError{code: exitViolation, err: errors.New(rep.Violation.Error())}
			case mismatch != nil:
				return &exitError{code: exitViolation, err: mismatch}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "the stopped peer's data directory (required)")
	cmd.Flags().Uint64Var(&upTo, "upto", 0, "replay up to this Raft index only (one known committed)")
	cmd.Flags().StringVar(&expect, "expect-hash", "", "the state hash expected at --upto")
	cmd.Flags().IntVar(&every, "check-every", 0, "check the invariants after every N-th command (0: paced by the state's size, linear in the log; 1: after each, exact index)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printReport(w io.Writer, r *audit.Report) {
	fmt.Fprintf(w, "raft log %s: entries %d-%d", r.RaftDir, r.FirstIndex, r.LastIndex)
	if r.UpTo > 0 {
		fmt.Fprintf(w, ", replayed up to %d", r.UpTo)
	}
	fmt.Fprintln(w)
	for _, s := range r.Snapshots {
		what := "checked on its own"
		switch {
		case s.Base:
			what = "the replay's base"
		case s.Matched:
			what = "the replay agrees"
		}
		fmt.Fprintf(w, "snapshot %s at index %d (applied %d, hash %s): %s\n", s.ID, s.Index, s.Applied, short(s.Hash), what)
	}
	from := "the empty ledger"
	if r.BaseIndex > 0 {
		from = fmt.Sprintf("the snapshot at index %d", r.BaseIndex)
	}
	fmt.Fprintf(w, "from %s: %d entries, %d commands (%d rejected by the ledger, %d single decisions refused), invariants checked on %d states\n",
		from, r.Entries, r.Commands, r.Rejected, r.RefusedDecisions, r.Checked)
	if len(r.RejectedByKind) > 0 {
		kinds := make([]string, 0, len(r.RejectedByKind))
		for k, n := range r.RejectedByKind {
			kinds = append(kinds, fmt.Sprintf("%s ×%d", k, n))
		}
		sort.Strings(kinds)
		fmt.Fprintf(w, "rejected: %s\n", strings.Join(kinds, ", "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if r.Violation != nil {
		fmt.Fprintf(w, "VIOLATION at index %d (%s): %s\n", r.Violation.Index, r.Violation.Kind, r.Violation.Message)
		return
	}
	fmt.Fprintf(w, "%d entries, all invariants hold; index %d, applied index %d, state hash %s\n", r.Entries, r.Index, r.AppliedIndex, r.Hash)
}
