package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/coopgrid/coopgrid/api"
)

// newDrainCmd is `peer machines drain NAME` (drain true) or `undrain NAME`.
func newDrainCmd(drain bool) *cobra.Command {
	var f clientFlags
	use, short, long := "drain NAME", "Drain one of this organisation's machines: no new work, its task runs to its end",
		`Drain one of this organisation's machines for maintenance: the leader places no
new task on it and preempts nothing there; the task it runs keeps running and
ends as usual (peer tasks shows it). The machine stays up: stop its task with
peer cancel if it cannot wait. peer machines marks it "(drained)" until
peer machines undrain NAME. NAME is the machine's name in the machines file,
or its ID ORG/NAME; only the machine's own organisation may drain it.

--json prints the machine as peer machines --json does.`
	if !drain {
		use, short, long = "undrain NAME", "Offer a drained machine again",
			`Offer a machine drained with peer machines drain again: the leader may place
work on it from its next scheduling pass. Undraining a machine that is not
drained changes nothing.

--json prints the machine as peer machines --json does.`
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: "  peer machines " + use[:len(use)-len(" NAME")] + " node-3 --data /var/lib/coopgrid",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.DrainRequest{Machine: args[0], Drained: drain}
			if err := api.ValidateDrain(req); err != nil {
				return usageErr("%s", err.(*api.Error).Message)
			}
			c, err := f.connect()
			if err != nil {
				return err
			}
			m, err := c.DrainMachine(cmd.Context(), req)
			if err != nil {
				return c.fail(cmd.Name()+" "+args[0], err)
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), m)
			}
			switch {
			case m.Drained && m.Task != "":
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s drained: no new work; its task %s runs to its end\n", m.ID, m.Task)
			case m.Drained:
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s drained: no new work, and it runs no task\n", m.ID)
			default:
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s takes work again\n", m.ID)
			}
			return err
		},
	}
	addClientFlags(cmd, &f, true)
	return cmd
}
