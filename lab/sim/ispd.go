package sim

// The iSPD engine: the same policies, driven the way the author's iSPD
// simulator drove them (gspd-unesp/ispd at commit 196cdf60d2, "Added casio
// Code"; file and line below refer to that commit). Selected by
// Config.Engine = EngineISPD (`peer sim --engine ispd`, or `sim.engine: ispd`
// in a scenario). Its rules, each from the code:
//
//  1. One decision per call. escalonar() returns after the first allocation
//     or preemption (EHOSEP.java L339, L359; HOSEP.java L264, L284); the
//     engine asks the policy for a pass and applies only its first decision.
//  2. When the scheduler is called (CS_Mestre.java, escDisponivel):
//     - a task reaching the master (a new one, or a preempted one coming
//       back) calls it only if the master is idle (L114-123);
//     - a completion calls it whenever tasks are queued, and makes the
//       master idle otherwise (L106-113);
//     - a dispatched task leaving the master calls it again while tasks are
//       queued, and makes the master idle otherwise (L180-187), so
//       allocations chain at one instant until a call decides nothing;
//     - a call that decides nothing leaves the master busy: later arrivals
//       do not call it until a completion does.
//     There is no periodic pass (SimulacaoSequencial.java schedules only
//     ESCALONAR events the master asks for).
//  3. Status updates every 15 s (EHOSEP.java L519-521, getTempoAtualizar;
//     SimulacaoSequencial.java L177-199, at 15, 30, 45 … s). A machine given
//     a task (free or by preemption) is "Bloqueado" (EHOSEP.java L338,
//     L357); the next update makes it "Incerto", the one after "Livre" or
//     "Ocupado" from what it runs (L276-293). Until then it is neither free
//     nor a victim (buscarRecurso tests "Livre" and "Ocupado", L122, L208):
//     policy.State.Held. A completion frees a machine seen "Ocupado" at once
//     (L376-391).
//  4. getCheckPoint() returns 0 (Tarefa.java L337-345), so the waste test
//     always takes the whole run (EHOSEP.java L215-221) and a preempted task
//     keeps (int)(mflops/0)·0 = 0 MFlop (CS_Mestre.java L483-484): the
//     engine ignores the checkpoint block, and "with checkpointing" runs
//     exactly like "without".
//  5. HOSEP is run with its iSPD options (policy.HOSEP StrictExcess and
//     NextOrg: HOSEP.java L173, L237-288); EHOSEP's code already matches
//     algorithms 3-5 as policy/ implements them (see docs/REPRODUCTION.md).
//
// What is not modelled: iSPD's network. The paper's grid has every machine
// on a direct link to the master (seed 000 L1068); here a task, a message
// and a status reply take no time, so the events a transfer would spread
// over milliseconds happen at one instant, in the order the Java code
// creates them. The workload rules (sizes on the lower half of each range,
// arrivals at delay + Exp(mean 5 s)) are scenario.Options.ISPDWorkload.

import (
	"container/heap"
	"context"
	"fmt"
	"math"

	"github.com/coopgrid/coopgrid/policy"
)

// Engines.
const (
	// EngineDefault is this project's model (sim.go).
	EngineDefault = "default"
	// EngineISPD is the author's iSPD semantics (this file).
	EngineISPD = "ispd"
)

// ISPDUpdateSeconds is the status-update period of the author's schedulers
// (EHOSEP.java L519-521, HOSEP.java getTempoAtualizar).
const ISPDUpdateSeconds = 15

// machineView is the scheduler's view of a machine (ControleEscravos).
type machineView uint8

const (
	viewFree      machineView = iota // "Livre"
	viewBusy                         // "Ocupado"
	viewBlocked                      // "Bloqueado": given a task, no update since
	viewUncertain                    // "Incerto": one update since
)

// masterEvent is an event at the master at the current instant; with no
// network they all happen now, first in first out.
type masterEvent uint8

const (
	// evSchedule is one escalonar() call (EventoFuturo.ESCALONAR).
	evSchedule masterEvent = iota
	// evDispatched is a dispatched task leaving the master (SAÍDA at
	// CS_Mestre.saidaDeCliente, L172-188).
	evDispatched
)

// ispdState is what the iSPD engine adds to the simulator.
type ispdState struct {
	view       []machineView
	held       []bool
	nHeld      int
	idle       bool // CS_Mestre.escDisponivel
	events     []masterEvent
	nextUpdate float64
}

// ISPDPolicy returns the variant of p the iSPD engine runs: HOSEP with the
// author's code's options; every other policy as it is.
func ISPDPolicy(p policy.Policy) policy.Policy {
	if _, ok := p.(policy.HOSEP); ok {
		return policy.HOSEP{StrictExcess: true, NextOrg: true}
	}
	return p
}

func runISPD(ctx context.Context, s *simulator) error {
	s.cfg.CheckpointBlockSeconds = 0 // rule 4
	s.pol = ISPDPolicy(s.pol)
	is := &ispdState{
		view:       make([]machineView, len(s.onMach)),
		held:       make([]bool, len(s.onMach)),
		idle:       true,
		nextUpdate: ISPDUpdateSeconds,
	}
	nT := len(s.tasks)
	for iter := 0; s.completedN < nT; iter++ {
		if iter&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("at t=%g s: %w", s.now, err)
			}
		}
		if len(is.events) > 0 {
			ev := is.events[0]
			is.events = is.events[1:]
			if err := s.ispdMasterEvent(is, ev); err != nil {
				return err
			}
			continue
		}
		for len(s.heap) > 0 && s.stale(s.heap[0]) {
			heap.Pop(&s.heap)
		}
		next := math.Inf(1)
		if s.nextAr < nT {
			next = s.tasks[s.nextAr].spec.SubmitSeconds
		}
		if len(s.heap) > 0 {
			next = math.Min(next, s.heap[0].at)
		}
		if math.IsInf(next, 1) {
			return fmt.Errorf("stuck at t=%g s: %d tasks queued, none running, none to arrive, and under iSPD's rules nothing calls the scheduler again (policy %s)",
				s.now, len(s.queue), s.pol.Name())
		}
		// An update comes after every event at or before its time
		// (SimulacaoSequencial.java L193: sent when earlier than the next
		// event). Without held machines it changes nothing and is skipped.
		if is.nHeld > 0 && is.nextUpdate < next {
			s.now = is.nextUpdate
			is.update(s)
			is.nextUpdate += ISPDUpdateSeconds
			continue
		}
		if s.cfg.MaxSeconds > 0 && next > s.cfg.MaxSeconds {
			return fmt.Errorf("not finished by t=%g s (max seconds): %d of %d tasks completed", s.cfg.MaxSeconds, s.completedN, nT)
		}
		s.now = next
		if len(s.heap) > 0 && s.heap[0].at == s.now {
			c := heap.Pop(&s.heap).(completion)
			s.complete(c.task)
			if is.view[c.machine] == viewBusy { // EHOSEP.java L376-391
				is.view[c.machine] = viewFree
			}
			if len(s.queue) == 0 { // CS_Mestre.java L107-113
				is.idle = true
			} else {
				is.events = append(is.events, evSchedule)
			}
			continue
		}
		s.enqueue(s.nextAr)
		s.nextAr++
		is.arrive()
	}
	return nil
}

// arrive is a task reaching the master (CS_Mestre.java L114-123): the
// scheduler is called only if the master is idle.
func (is *ispdState) arrive() {
	if is.idle {
		is.idle = false
		is.events = append(is.events, evSchedule)
	}
}

// update is one status-update cycle (EHOSEP.java L264-299).
func (is *ispdState) update(s *simulator) {
	for m, v := range is.view {
		switch v {
		case viewBlocked:
			is.view[m] = viewUncertain
		case viewUncertain:
			is.view[m] = viewFree
			if len(s.onMach[m]) > 0 {
				is.view[m] = viewBusy
			}
			is.held[m] = false
			is.nHeld--
		}
	}
}

// hold blocks machine m, given a task at now. Updates are skipped while
// nothing is held, so the first hold after such a gap sets the next update
// to the first multiple of the period at or after now (one at now itself
// comes after this instant's events, as in SimulacaoSequencial.java L193).
func (is *ispdState) hold(m int, now float64) {
	if is.nHeld == 0 {
		is.nextUpdate = math.Ceil(now/ISPDUpdateSeconds) * ISPDUpdateSeconds
		if is.nextUpdate == 0 {
			is.nextUpdate = ISPDUpdateSeconds // the first update is at 15 s
		}
	}
	if !is.held[m] {
		is.held[m] = true
		is.nHeld++
	}
	is.view[m] = viewBlocked
}

func (s *simulator) ispdMasterEvent(is *ispdState, ev masterEvent) error {
	switch ev {
	case evDispatched:
		if len(s.queue) > 0 { // CS_Mestre.java L180-187
			is.events = append(is.events, evSchedule)
		} else {
			is.idle = true
		}
		return nil
	case evSchedule:
		d, ok, err := s.decideOne(is)
		if err != nil || !ok {
			return err
		}
		is.hold(d.Machine, s.now)
		// An allocation is a dispatch; a preemption sends the stopped task
		// back to the master, which dispatches the waiting one
		// (EHOSEP.java L447-515: adicionarTarefa, then enviarTarefa) and
		// calls the scheduler if it was idle (CS_Mestre.java L114-119).
		is.events = append(is.events, evDispatched)
		if d.Kind == policy.Preempt {
			is.arrive()
		}
		return nil
	}
	return fmt.Errorf("unknown master event %d (internal error)", ev)
}

// decideOne calls the policy on the scheduler's view and applies its first
// decision only (rule 1).
func (s *simulator) decideOne(is *ispdState) (policy.Decision, bool, error) {
	s.passes++
	st := s.state()
	st.Held = is.held
	ds, err := s.pol.Schedule(st)
	if err != nil {
		return policy.Decision{}, false, fmt.Errorf("at t=%g s: policy %s: %w", s.now, s.pol.Name(), err)
	}
	if len(ds) == 0 {
		return policy.Decision{}, false, nil
	}
	d := ds[0]
	if err := s.apply(d); err != nil {
		return d, false, fmt.Errorf("at t=%g s: policy %s: decision (%s task %q on machine %d): %w", s.now, s.pol.Name(), d.Kind, d.Task, d.Machine, err)
	}
	s.decisions++
	if s.cfg.EnforceLimits {
		for i, pi := range s.piMilliW {
			if lim := s.inst.Orgs[i].LimitMilliW; pi > lim {
				return d, false, fmt.Errorf("at t=%g s: policy %s: org %q at %d mW above its limit %d mW", s.now, s.pol.Name(), s.inst.Orgs[i].Name, pi, lim)
			}
		}
	}
	if s.cfg.CheckInvariants {
		if err := s.checkInvariants(); err != nil {
			return d, false, fmt.Errorf("at t=%g s: after a decision of policy %s: %w", s.now, s.pol.Name(), err)
		}
	}
	return d, true, nil
}
