package ledger

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable reason for rejecting a command or a
// decision. Codes are part of the API: clients match on them.
type Code string

const (
	// CodeMalformed: the bytes do not decode, a field is missing, unknown or
	// out of range, or the command carries no body or more than one.
	CodeMalformed Code = "malformed"
	// CodeBadVersion: the command version is not one this ledger applies
	// (above MaxCommandVersion: a newer build's), or is below a field it
	// carries (version.go).
	CodeBadVersion Code = "bad_version"
	// CodeUnknownOrg, CodeUnknownMachine, CodeUnknownTask: a reference to
	// something the ledger does not hold.
	CodeUnknownOrg     Code = "unknown_org"
	CodeUnknownMachine Code = "unknown_machine"
	CodeUnknownTask    Code = "unknown_task"
	// CodeNotOwner: the acting peer is not the one registered for the acting
	// organisation, or the organisation acts on another's task or machine.
	CodeNotOwner Code = "not_owner"
	// CodeBadSignature: the command's signature is not its peer's over its
	// content, its peer ID embeds no Ed25519 key, or it is unsigned and
	// acts for an organisation that signs (or registers a new one in a
	// federation that signs). sign.go.
	CodeBadSignature Code = "bad_signature"
	// CodeExists: the organisation, peer or machine is already registered.
	CodeExists Code = "exists"
	// CodeMachineBusy: the machine holds a task (or an unreported run).
	CodeMachineBusy Code = "machine_busy"
	// CodeMachineDown: the machine is lost.
	CodeMachineDown Code = "machine_down"
	// CodeLimitExceeded: PI_i would exceed Lim_i.
	CodeLimitExceeded Code = "limit_exceeded"
	// CodeBadState: the task or machine is not in a state that allows the
	// command (e.g. starting a task that is not assigned to that machine).
	CodeBadState Code = "bad_state"
	// CodeStale: a decision refers to a state that no longer holds (the task
	// is no longer queued, the victim no longer runs on the machine).
	CodeStale Code = "stale"
	// CodeOverflow: an energy account would overflow int64.
	CodeOverflow Code = "overflow"
	// CodeImplausible: a report the reporting machine's own declarations
	// make impossible (more energy than its busy power allows, done sooner
	// than its speed allows, a checkpoint saving more work than that,
	// simulated energy on a live federation), or a machine declared more
	// efficient than any hardware (plausible.go).
	CodeImplausible Code = "implausible"
	// CodeQueueFull: the submit would take the organisation's unfinished
	// tasks over the federation's cap (Rules.MaxQueuedPerOrg).
	CodeQueueFull Code = "queue_full"
	// CodeExecutorMode: a registration declares simulated executors on a
	// live federation, or live ones on a simulated federation.
	CodeExecutorMode Code = "executor_mode"
	// CodeSchedulingMode: the command does not match how the federation
	// schedules: a decisions batch on a federation whose peers compute
	// every pass themselves (Rules.Scheduling), or a schedule trigger on
	// one without those settings (schedule.go).
	CodeSchedulingMode Code = "scheduling_mode"
	// CodeClockBackwards: a schedule trigger's time is before the last
	// applied trigger's.
	CodeClockBackwards Code = "clock_backwards"
	// CodeNothingToSchedule: the pass a schedule trigger asks for decides
	// nothing on the current state.
	CodeNothingToSchedule Code = "nothing_to_schedule"
	// CodePolicyFailed: the federation's policy failed on the pass a
	// schedule trigger asks for (identically on every peer).
	CodePolicyFailed Code = "policy_failed"
	// CodeNoMatch: a decision places a task on a machine whose owner's
	// policy, attributes or capacity can never take it.
	CodeNoMatch Code = "no_match"
	// CodeGangIncomplete: a decision places a part of a gang while the
	// same decisions do not place every part of it, each on its own free
	// machine, all of one organisation (gang.go).
	CodeGangIncomplete Code = "gang_incomplete"
	// CodeNoMachineFits: a submitted task asks for more memory, CPUs or GPUs
	// than any machine of the federation has.
	CodeNoMachineFits Code = "no_machine_fits"
	// CodeRetention: a forget_tasks on a federation without a retention
	// rule, or naming a task the rule does not let go yet (retention.go).
	CodeRetention Code = "retention"
)

// Error is a rejected command or decision.
type Error struct {
	Code Code   `json:"code"`
	Msg  string `json:"msg"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Msg }

// Is makes errors.Is(err, &Error{Code: c}) match on the code alone.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

func errf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the Code of err if it is (or wraps) an *Error, else "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
