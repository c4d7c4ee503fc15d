package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/config"
)

func newInitCmd() *cobra.Command {
	var (
		o      config.InitOptions
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "init --org NAME --data DIR [--machines FILE] (--new-federation | --secret FILE)",
		Short: "Create a peer's data directory: identity, federation secret, machines, config, API token",
		Long: `Create the data directory of this institution's peer: a persistent libp2p
identity, the federation secret, the machines this peer offers (GFLOPS
measured with a short built-in benchmark where the machines file leaves them
out), an API token and config.yaml (docs/CONFIG.md).

The first institution passes --new-federation: a new federation secret is
generated, and every other institution needs a copy of it, handed over out
of band. The others pass --secret FILE with that copy, then start with
peer run --bootstrap ADDRESS (an address the first peer prints).

Without --machines the peer offers no machines: its organisation only
submits work (give it a limit in watts in config.yaml, since 100% of no
machines is 0 W).

An initialised directory is never overwritten.`,
		Example: `  peer init --org uni-a --data /var/lib/coopgrid --machines machines.yaml --new-federation
  peer init --org uni-b --data /var/lib/coopgrid --machines machines.yaml --secret federation.key
  peer init --org uni-c --data ./c --secret federation.key --listen /ip4/0.0.0.0/tcp/9450 --api 127.0.0.1:9451 --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.Org == "":
				return usageErr("--org is required")
			case o.DataDir == "":
				return usageErr("--data is required (or set " + envData + ")")
			case o.NewFederation == (o.SecretFile != ""):
				return usageErr("give exactly one of --new-federation (start a federation) and --secret FILE (join one)")
			}
			res, err := config.Init(cmd.Context(), o)
			if err != nil {
				return inputExit(err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			printInit(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	fl := cmd.Flags()
	fl.StringVar(&o.Org, "org", "", "the organisation this peer acts for (1-64 characters of [A-Za-z0-9._-])")
	fl.StringVar(&o.DataDir, "data", "", "the data directory to create")
	fl.StringVar(&o.MachinesFile, "machines", "", "machines file: the machines offered and the owner's policy (docs/EXECUTOR.md)")
	fl.BoolVar(&o.NewFederation, "new-federation", false, "start a new federation: generate its secret")
	fl.StringVar(&o.SecretFile, "secret", "", "join a federation: a copy of its secret file")
	fl.StringArrayVar(&o.Listen, "listen", nil, "TCP multiaddr to listen on, repeatable (default "+config.DefaultListen+")")
	fl.StringVar(&o.API, "api", "", "the HTTP API's HOST:PORT (default "+config.DefaultAPI+")")
	fl.DurationVar(&o.MeasureFor, "measure", 2*time.Second, "how long the GFLOPS benchmark runs for machines without gflops")
	fl.BoolVar(&asJSON, "json", false, "print what was created as JSON")
	return cmd
}

func printInit(w io.Writer, r config.InitResult) {
	fmt.Fprintf(w, "Initialised organisation %s in %s\n", r.Org, r.DataDir)
	fmt.Fprintf(w, "  peer ID     %s\n", r.PeerID)
	fmt.Fprintf(w, "  config      %s\n", r.ConfigFile)
	fmt.Fprintf(w, "  API token   %s\n", r.TokenFile)
	if len(r.Machines) == 0 {
		fmt.Fprintf(w, "  machines    none: this organisation only submits work\n")
	}
	for i, m := range r.Machines {
		label := "            "
		if i == 0 {
			label = "  machines  "
		}
		how := ""
		if m.Measured {
			how = " (measured)"
		}
		fmt.Fprintf(w, "%s%s: %s GFLOPS%s, %s W busy\n", label, m.Name, num(m.GFLOPS), how, num(m.BusyWatts))
	}
	fmt.Fprintln(w)
	if r.NewFederation {
		fmt.Fprintf(w, "A new federation secret is in %s.\n", r.SecretFile)
		fmt.Fprintf(w, "Every other institution needs a copy of that file to join: hand it over out of\n")
		fmt.Fprintf(w, "band (in person, or over a channel you already trust), never in clear e-mail.\n")
		fmt.Fprintf(w, "Whoever holds it can connect to the federation.\n\n")
		fmt.Fprintf(w, "Start the peer:  peer run --data %s\n", r.DataDir)
		fmt.Fprintf(w, "It prints the addresses the others pass to peer run --bootstrap.\n")
		return
	}
	fmt.Fprintf(w, "The federation secret was copied to %s.\n\n", r.SecretFile)
	fmt.Fprintf(w, "Join:  peer run --data %s --bootstrap /ip4/…/tcp/…/p2p/… (an address a member printed)\n", r.DataDir)
	fmt.Fprintf(w, "Later starts need no --bootstrap: the peer remembers the members it met.\n")
}
