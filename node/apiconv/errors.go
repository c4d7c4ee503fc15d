package apiconv

import (
	"errors"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// apiCodes is the API code of every ledger code; the status follows from
// it (api.StatusOf). TestErrorCoversEveryLedgerCode fails when a ledger
// code is missing here.
//
//	malformed, bad_version                                → 400 bad_request
//	unknown_org, unknown_machine, unknown_task            → 404 not_found
//	not_owner, bad_signature                              → 403 forbidden
//	exists, machine_busy, machine_down, limit_exceeded,
//	bad_state, stale, overflow, implausible, queue_full,
//	executor_mode, no_match, no_machine_fits,
//	scheduling_mode, clock_backwards, nothing_to_schedule,
//	gang_incomplete, retention                            → 409 conflict
//	policy_failed                                         → 500 internal
//
// overflow is 409, not 500: the command is well formed and the peer works;
// it is the state (an energy account near the int64 bound) that does not
// allow it, like the other refusals by the state.
var apiCodes = map[ledger.Code]string{
	ledger.CodeMalformed:      api.CodeBadRequest,
	ledger.CodeBadVersion:     api.CodeBadRequest,
	ledger.CodeUnknownOrg:     api.CodeNotFound,
	ledger.CodeUnknownMachine: api.CodeNotFound,
	ledger.CodeUnknownTask:    api.CodeNotFound,
	ledger.CodeNotOwner:       api.CodeForbidden,
	ledger.CodeBadSignature:   api.CodeForbidden,
	ledger.CodeExists:         api.CodeConflict,
	ledger.CodeMachineBusy:    api.CodeConflict,
	ledger.CodeMachineDown:    api.CodeConflict,
	ledger.CodeLimitExceeded:  api.CodeConflict,
	ledger.CodeBadState:       api.CodeConflict,
	ledger.CodeStale:          api.CodeConflict,
	ledger.CodeOverflow:       api.CodeConflict,
	ledger.CodeImplausible:    api.CodeConflict,
	ledger.CodeQueueFull:      api.CodeConflict,
	ledger.CodeExecutorMode:   api.CodeConflict,
	ledger.CodeNoMatch:        api.CodeConflict,
	ledger.CodeNoMachineFits:  api.CodeConflict,
	// Only the leader's scheduling commands get these; an API caller never
	// proposes one, but a forwarded refusal must still map to something
	// stable.
	ledger.CodeSchedulingMode:    api.CodeConflict,
	ledger.CodeClockBackwards:    api.CodeConflict,
	ledger.CodeNothingToSchedule: api.CodeConflict,
	ledger.CodeGangIncomplete:    api.CodeConflict,
	ledger.CodePolicyFailed:      api.CodeInternal,
	// Only the leader's retention duty proposes forget_tasks.
	ledger.CodeRetention: api.CodeConflict,
}

// Error maps a ledger refusal (*ledger.Error, possibly wrapped) to the API
// error with the matching code and status; nil and any other error are
// returned unchanged. A ledger code without a mapping is 500 internal.
//
// A bad request's message is the ledger's own, which says what is wrong
// with the request (and so reads like the API's own checks). Any other
// refusal also names the ledger's code, "… (ledger: limit_exceeded)":
// one API code covers several ledger codes, and the ledger's are stable.
func Error(err error) error {
	var le *ledger.Error
	if err == nil || !errors.As(err, &le) {
		return err
	}
	code, ok := apiCodes[le.Code]
	if !ok {
		code = api.CodeInternal
	}
	if code == api.CodeBadRequest {
		return api.Errorf(code, "%s", le.Msg)
	}
	return api.Errorf(code, "%s (ledger: %s)", le.Msg, le.Code)
}
