package ledger

// KindDrainMachine drains one of the acting organisation's machines for
// maintenance, or undrains it.
const KindDrainMachine Kind = "drain_machine"

// DrainMachine sets whether one of the acting organisation's machines is
// drained (Drained true) or takes work again (false). A drained machine
// gets no new work: the policy's view leaves it out (PolicyView) and
// Apply refuses a decision that places a task on it (CodeMachineDown, as
// for a lost machine: the decision was made on a stale view). The task it
// runs keeps running and ends as usual (finishes, fails, or is cancelled);
// the machine stays up, heartbeats and is declared lost as any other.
// Draining a drained machine, or undraining one that is not, changes
// nothing and is no error. Only the machine's organisation may (un)drain
// it (CodeNotOwner).
type DrainMachine struct {
	Machine string `json:"machine"`
	Drained bool   `json:"drained"`
}

func (*DrainMachine) Kind() Kind { return KindDrainMachine }

func (b *DrainMachine) validate() *Error { return validMachineRef(b.Machine) }

func (b *DrainMachine) check(l *Ledger, c *Command) (change, *Error) {
	m, err := l.ownMachine(c, b.Machine)
	if err != nil {
		return nil, err
	}
	drained := b.Drained
	return func(uint64, *Result) {
		if m.Drained != drained {
			l.machinesChanged()
		}
		m.Drained = drained
	}, nil
}
