package ledger

// KindMachineLoad is an owner's peer recording its machine's local load.
const KindMachineLoad Kind = "machine_load"

// MachineLoad records the load of a machine's own users (its owner's
// local work, the grid's tasks taken off) as a share of the machine, so
// that the deadline predictor assumes the capacity left to the grid
// (docs/POLICY.md §9, "Local load in the predictor"): a replicated input
// of the scheduling pass, which every peer computes, not the gossiped
// heartbeat load, which differs from peer to peer. The owner's peer's load
// monitor (node/load.go) proposes it for its opportunistic machines when
// the load moved by a tenth or more since the last record. Only the
// machine's organisation may send it (CodeNotOwner); the same load again
// changes nothing but the time of the record.
type MachineLoad struct {
	Machine string `json:"machine,omitempty" since:"3"`
	// LoadPermille is the owner's share of the machine, 0 (idle) to 1000
	// (every CPU busy with the owner's work, or more).
	LoadPermille int64 `json:"load_permille,omitempty" since:"3"`
}

func (*MachineLoad) Kind() Kind { return KindMachineLoad }

// wakesScheduler: a load changes predictions, not what may be placed.
func (*MachineLoad) wakesScheduler(*Result) bool { return false }

func (b *MachineLoad) validate() *Error {
	if b.LoadPermille < 0 || b.LoadPermille > 1000 {
		return errf(CodeMalformed, "load_permille %d: want 0 (idle) to 1000 (every CPU busy)", b.LoadPermille)
	}
	return validMachineRef(b.Machine)
}

func (b *MachineLoad) check(l *Ledger, c *Command) (change, *Error) {
	m, err := l.ownMachine(c, b.Machine)
	if err != nil {
		return nil, err
	}
	load := b.LoadPermille
	return func(uint64, *Result) {
		if m.OwnerLoadPermille != load {
			l.machinesChanged()
		}
		m.OwnerLoadPermille = load
		m.OwnerLoadAtMs = max(m.OwnerLoadAtMs, c.AtMs)
	}, nil
}
