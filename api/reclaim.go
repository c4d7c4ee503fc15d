package api

import (
	"context"
	"net/http"
)

// MachineReclaimer is an optional interface of a Backend whose
// organisation's opportunistic machines may be reclaimed by their owner
// and released again: POST /v1/machines/reclaim. A Backend without it
// answers that route 404 not_found.
type MachineReclaimer interface {
	// ReclaimMachine reclaims (Reclaimed true) or releases one of this
	// organisation's opportunistic machines and returns the machine as the
	// ledger then holds it. A reclaimed machine takes no grid work and the
	// tasks it held go back to the queue (a running one checkpointed and
	// stopped). Machine is its name or its ID "<org>/<name>"; another
	// organisation's machine is refused with CodeForbidden, a machine not
	// registered opportunistic with CodeConflict.
	ReclaimMachine(ctx context.Context, req ReclaimRequest) (MachineView, error)
}

// ReclaimRequest is POST /v1/machines/reclaim.
type ReclaimRequest struct {
	Machine   string `json:"machine"`
	Reclaimed bool   `json:"reclaimed"`
}

// ValidateReclaim checks what the API can, as ValidateDrain does.
func ValidateReclaim(req ReclaimRequest) error {
	return ValidateDrain(DrainRequest{Machine: req.Machine})
}

func (s *Server) reclaim(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	d, ok := s.b.(MachineReclaimer)
	if !ok {
		return Errorf(CodeNotFound, "this peer does not reclaim machines")
	}
	var req ReclaimRequest
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if err := ValidateReclaim(req); err != nil {
		return err
	}
	m, err := d.ReclaimMachine(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

// ReclaimMachine calls POST /v1/machines/reclaim.
func (c *Client) ReclaimMachine(ctx context.Context, req ReclaimRequest) (MachineView, error) {
	var m MachineView
	_, err := c.do(ctx, http.MethodPost, "/v1/machines/reclaim", nil, req, &m, true)
	return m, err
}
