package scenario

// Derived quantities of an Instance that the simulator's metrics need. They
// are methods rather than fields so that Instance stays the plain record the
// simulator consumes, and so that they can never disagree with the machines.
// Each walks the machines: O(len(Machines)) per call.

// SystemMFLOPS is the federation's computing power: Σ d over all machines.
func (in *Instance) SystemMFLOPS() int64 {
	var s int64
	for _, m := range in.Machines {
		s += m.MFLOPS
	}
	return s
}

// SystemMilliW is the federation's busy power: Σ c over all machines. It is
// what the limit "system" resolves to.
func (in *Instance) SystemMilliW() int64 {
	var s int64
	for _, m := range in.Machines {
		s += m.BusyMilliW
	}
	return s
}

// QuotaMFLOPS is Quota_i: the computing power organisation org contributes.
func (in *Instance) QuotaMFLOPS(org int) int64 {
	var s int64
	for _, m := range in.Machines {
		if m.Owner == org {
			s += m.MFLOPS
		}
	}
	return s
}

// PowerQuotaMilliW is PowerQuota_i: the busy power of org's machines.
func (in *Instance) PowerQuotaMilliW(org int) int64 {
	var s int64
	for _, m := range in.Machines {
		if m.Owner == org {
			s += m.BusyMilliW
		}
	}
	return s
}

// MeanMachineMFLOPS is the federation's mean machine power, the reference
// of Ideal_t in the EHOSEP satisfaction (seed 000 eq. 4.1). 0 without
// machines.
func (in *Instance) MeanMachineMFLOPS() float64 {
	if len(in.Machines) == 0 {
		return 0
	}
	return float64(in.SystemMFLOPS()) / float64(len(in.Machines))
}

// OrgMeanMFLOPS is the mean power of org's own machines, the reference of
// CT_ideal in the HOSEP satisfaction (seed 001 eqs. 1-2). 0 if org owns no
// machine.
func (in *Instance) OrgMeanMFLOPS(org int) float64 {
	var s, n int64
	for _, m := range in.Machines {
		if m.Owner == org {
			s += m.MFLOPS
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(s) / float64(n)
}

// OrgIndex returns the index of the named organisation, or -1.
func (in *Instance) OrgIndex(name string) int {
	for i, o := range in.Orgs {
		if o.Name == name {
			return i
		}
	}
	return -1
}
