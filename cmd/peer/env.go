package main

import (
	"os"

	"github.com/spf13/cobra"
)

// Environment variables that stand for flags, for operators who talk to one
// peer all day (docs/CONFIG.md): a flag given on the command line wins.
const (
	envData = "COOPGRID_DATA" // --data: the peer's data directory
	envAPI  = "COOPGRID_API"  // --api: the peer's API address
)

// envFlags maps each such flag to its variable.
var envFlags = [...]struct{ flag, env string }{{"data", envData}, {"api", envAPI}}

// applyEnv sets every flag of cmd that has a variable, was not given, and
// whose variable is set and not empty. A value the flag refuses is a usage
// error naming the variable.
func applyEnv(cmd *cobra.Command) error {
	for _, e := range envFlags {
		f := cmd.Flags().Lookup(e.flag)
		if f == nil || f.Changed {
			continue
		}
		v, ok := os.LookupEnv(e.env)
		if !ok || v == "" {
			continue
		}
		if err := cmd.Flags().Set(e.flag, v); err != nil {
			return usageErr("%s=%q (for --%s): %v", e.env, v, e.flag, err)
		}
	}
	return nil
}

// documentEnv names the variable in the help of every flag that has one.
func documentEnv(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, e := range envFlags {
			if f := c.LocalFlags().Lookup(e.flag); f != nil {
				f.Usage += " [$" + e.env + "]"
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
