package api

import (
	"context"
	"net/http"
	"strings"
)

// MachineDrainer is an optional interface of a Backend that drains this
// organisation's machines for maintenance: POST /v1/machines/drain. A
// Backend without it answers that route 404 not_found.
type MachineDrainer interface {
	// DrainMachine sets whether one of this organisation's machines is
	// drained (no new work; its task runs to its end) and returns the
	// machine as the ledger then holds it. Machine is its name, or its ID
	// "<org>/<name>"; another organisation's machine is refused with
	// CodeForbidden.
	DrainMachine(ctx context.Context, req DrainRequest) (MachineView, error)
}

// DrainRequest is POST /v1/machines/drain.
type DrainRequest struct {
	Machine string `json:"machine"`
	Drained bool   `json:"drained"`
}

// ValidateDrain checks what the API can: a machine is named, at most
// 129 characters ("<org>/<name>", 64 each), without spaces.
func ValidateDrain(req DrainRequest) error {
	if req.Machine == "" || len(req.Machine) > 129 || strings.ContainsAny(req.Machine, " \t\r\n") {
		return Errorf(CodeBadRequest, "machine %q: want a machine's name or <org>/<name>", req.Machine)
	}
	return nil
}

func (s *Server) drain(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	d, ok := s.b.(MachineDrainer)
	if !ok {
		return Errorf(CodeNotFound, "this peer does not drain machines")
	}
	var req DrainRequest
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if err := ValidateDrain(req); err != nil {
		return err
	}
	m, err := d.DrainMachine(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

// DrainMachine calls POST /v1/machines/drain.
func (c *Client) DrainMachine(ctx context.Context, req DrainRequest) (MachineView, error) {
	var m MachineView
	_, err := c.do(ctx, http.MethodPost, "/v1/machines/drain", nil, req, &m, true)
	return m, err
}
