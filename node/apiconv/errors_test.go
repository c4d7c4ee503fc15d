package apiconv_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// ledgerCodes reads every constant of type ledger.Code from the ledger's
// source, so that a code added there shows up here without anyone
// remembering to list it.
func ledgerCodes(t *testing.T) map[string]ledger.Code {
	t.Helper()
	files, err := filepath.Glob("../../ledger/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("ledger sources: %v %v", files, err)
	}
	codes := map[string]ledger.Code{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is not a string literal", f, name.Name)
					}
					v, _ := strconv.Unquote(lit.Value)
					codes[name.Name] = ledger.Code(v)
				}
			}
		}
	}
	if len(codes) < 13 {
		t.Fatalf("found only %d ledger codes: %v", len(codes), codes)
	}
	return codes
}

// TestErrorCoversEveryLedgerCode pins the API code and HTTP status of
// every ledger code, and fails when the ledger gains a code that has none
// (it would be served as 500 internal).
func TestErrorCoversEveryLedgerCode(t *testing.T) {
	want := map[ledger.Code]struct {
		code   string
		status int
	}{
		ledger.CodeMalformed:      {api.CodeBadRequest, http.StatusBadRequest},
		ledger.CodeBadVersion:     {api.CodeBadRequest, http.StatusBadRequest},
		ledger.CodeUnknownOrg:     {api.CodeNotFound, http.StatusNotFound},
		ledger.CodeUnknownMachine: {api.CodeNotFound, http.StatusNotFound},
		ledger.CodeUnknownTask:    {api.CodeNotFound, http.StatusNotFound},
		ledger.CodeNotOwner:       {api.CodeForbidden, http.StatusForbidden},
		ledger.CodeBadSignature:   {api.CodeForbidden, http.StatusForbidden},
		ledger.CodeExists:         {api.CodeConflict, http.StatusConflict},
		ledger.CodeMachineBusy:    {api.CodeConflict, http.StatusConflict},
		ledger.CodeMachineDown:    {api.CodeConflict, http.StatusConflict},
		ledger.CodeLimitExceeded:  {api.CodeConflict, http.StatusConflict},
		ledger.CodeBadState:       {api.CodeConflict, http.StatusConflict},
		ledger.CodeStale:          {api.CodeConflict, http.StatusConflict},
		// The state does not allow it; the peer is fine (was 500 in the
		// test double, 409 in the daemon).
		ledger.CodeOverflow: {api.CodeConflict, http.StatusConflict},
		// Refused by the federation's executor rules (issue 15).
		ledger.CodeImplausible:   {api.CodeConflict, http.StatusConflict},
		ledger.CodeQueueFull:     {api.CodeConflict, http.StatusConflict},
		ledger.CodeExecutorMode:  {api.CodeConflict, http.StatusConflict},
		ledger.CodeNoMatch:       {api.CodeConflict, http.StatusConflict},
		ledger.CodeNoMachineFits: {api.CodeConflict, http.StatusConflict},
		// The leader's scheduling trigger (issue 15 item 3).
		ledger.CodeSchedulingMode:    {api.CodeConflict, http.StatusConflict},
		ledger.CodeClockBackwards:    {api.CodeConflict, http.StatusConflict},
		ledger.CodeNothingToSchedule: {api.CodeConflict, http.StatusConflict},
		// The policy failing identically on every peer is the software's
		// fault, not the caller's.
		ledger.CodePolicyFailed: {api.CodeInternal, http.StatusInternalServerError},
		// The leader's retention duty (issue 17).
		ledger.CodeRetention: {api.CodeConflict, http.StatusConflict},
		// A gang's decision (issue 21): only the leader's passes get it.
		ledger.CodeGangIncomplete: {api.CodeConflict, http.StatusConflict},
	}
	codes := ledgerCodes(t)
	for name, code := range codes {
		w, ok := want[code]
		if !ok {
			t.Errorf("ledger.%s (%q) has no API mapping: add it to apiconv's apiCodes and to this table", name, code)
			continue
		}
		err := apiconv.Error(fmt.Errorf("propose: %w", &ledger.Error{Code: code, Msg: "m"}))
		var e *api.Error
		if !errors.As(err, &e) || e.Code != w.code || e.Status != w.status {
			t.Errorf("ledger.%s: %#v, want %s %d", name, err, w.code, w.status)
			continue
		}
		// A bad request says what is wrong; any other refusal also names
		// the ledger's code.
		wantMsg := "m (ledger: " + string(code) + ")"
		if w.code == api.CodeBadRequest {
			wantMsg = "m"
		}
		if e.Message != wantMsg {
			t.Errorf("ledger.%s: message %q, want %q", name, e.Message, wantMsg)
		}
	}
	known := slices.Collect(maps.Values(codes))
	for code := range want {
		if !slices.Contains(known, code) {
			t.Errorf("%q is in the table but not among the ledger's codes", code)
		}
	}
}

func TestErrorPassesOthers(t *testing.T) {
	plain := errors.New("raft: not leader")
	if got := apiconv.Error(plain); got != plain {
		t.Errorf("non-ledger error changed: %v", got)
	}
	if apiconv.Error(nil) != nil {
		t.Error("nil changed")
	}
	err := apiconv.Error(&ledger.Error{Code: "from_the_future", Msg: "m"})
	if e, ok := err.(*api.Error); !ok || e.Code != api.CodeInternal || e.Status != http.StatusInternalServerError || !strings.Contains(e.Message, "from_the_future") {
		t.Errorf("unknown ledger code: %#v", err)
	}
}
