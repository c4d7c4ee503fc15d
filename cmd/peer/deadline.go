package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// defaultTimeout bounds a client command as a whole: every request it
// makes, its resends and its pauses together. Long enough for a large
// submission in batches or a leave that waits for tasks' grace periods; a
// write the federation cannot take (no quorum) is answered within the
// peer's leader wait, seconds, long before.
const defaultTimeout = time.Minute

// errWholeTimeout is the cause of a command's context when --timeout ends it.
var errWholeTimeout = errors.New("--timeout reached")

// boundWhole makes cmd's RunE run under a context that ends after --timeout
// (f.timeout), and turns the error of a command cut short by it into one
// sentence that says so. A command that follows the peer until something
// happens (a --watch or --wait flag set) is bounded only when --timeout is
// given explicitly.
func boundWhole(cmd *cobra.Command, f *clientFlags) {
	inner := cmd.RunE
	if inner == nil {
		return
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if f.timeout <= 0 || (follows(cmd) && !cmd.Flags().Changed("timeout")) {
			return inner(cmd, args)
		}
		ctx, cancel := context.WithTimeoutCause(cmd.Context(), f.timeout, errWholeTimeout)
		defer cancel()
		cmd.SetContext(ctx)
		err := inner(cmd, args)
		if err != nil && errors.Is(context.Cause(ctx), errWholeTimeout) {
			return &exitError{code: 1, err: fmt.Errorf("gave up after --timeout %s: %w", f.timeout, err)}
		}
		return err
	}
}

// follows reports a command told to keep following the peer.
func follows(cmd *cobra.Command) bool {
	for _, name := range []string{"watch", "wait"} {
		if fl := cmd.Flags().Lookup(name); fl != nil && fl.Value.String() == "true" {
			return true
		}
	}
	return false
}
