// Command peer is coopgrid's one binary: the simulator front end today, and
// the federation daemon and its CLI as they land (see README.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr marks bad command-line input (exit code 2).
func usageErr(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(withReexec(ctx), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the CLI with args and returns the exit code; tests call it
// directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "peer:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var logLevel string
	root := &cobra.Command{
		Use:           "peer",
		Short:         "coopgrid: a peer-to-peer scheduler for federations of institutions that share their computers",
		Version:       versionLine(buildInfo()),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(strings.ToUpper(logLevel))); err != nil {
				return usageErr("--log-level %q: want debug, info, warn or error", logLevel)
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})))
			return applyEnv(cmd)
		},
	}
	root.SetVersionTemplate("peer {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	root.AddCommand(newSimCmd())
	root.AddCommand(newReproduceCmd())
	root.AddCommand(newInitCmd(), newRunCmd())
	root.AddCommand(newClientCmds()...)
	root.AddCommand(newDemoCmd())
	root.AddCommand(newVerifyCmd(), newRecoverCmd())
	root.AddCommand(newSnapshotCmd())
	root.AddCommand(newVersionCmd())
	documentEnv(root)
	return root
}
