package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Online backup (issue 17, docs/CONFIG.md "Backup and restore"): POST
// /v1/backup answers a gzip'd tar of the running peer's data directory
// that `peer snapshot restore` accepts: a Raft snapshot taken now, a
// consistent copy of the history store, and the peer's other files. The
// archive holds the peer's identity key, so only the holder of the API
// token (the peer's administrator) may take it, like every other route;
// without it, or with a wrong one, 401 unauthorized.

// BackupBackend is the part of a Backend that takes online backups; a
// Backend without it answers POST /v1/backup with not_found.
type BackupBackend interface {
	// Backup writes the archive to w. It writes nothing to w when it
	// fails before the archive starts (then its error is the answer).
	Backup(ctx context.Context, w io.Writer) error
}

// BackupContentType is the media type of POST /v1/backup's answer.
const BackupContentType = "application/gzip"

func (s *Server) backup(w http.ResponseWriter, r *http.Request) error {
	bb, ok := s.b.(BackupBackend)
	if !ok {
		return Errorf(CodeNotFound, "this peer takes no online backup")
	}
	sw := &startedWriter{w: w}
	err := bb.Backup(r.Context(), sw)
	if err == nil {
		return nil
	}
	if !sw.started {
		return err
	}
	// Half an archive went out: break the connection, so that the client
	// sees a truncated answer rather than a complete-looking one.
	s.log.Error("api: backup failed while streaming", "err", err)
	panic(http.ErrAbortHandler)
}

// startedWriter sets the answer's headers at its first write.
type startedWriter struct {
	w       http.ResponseWriter
	started bool
}

func (sw *startedWriter) Write(p []byte) (int, error) {
	if !sw.started {
		sw.started = true
		sw.w.Header().Set("Content-Type", BackupContentType)
		sw.w.Header().Set("Content-Disposition", `attachment; filename="coopgrid-backup.tar.gz"`)
		sw.w.WriteHeader(http.StatusOK)
	}
	return sw.w.Write(p)
}

// Backup takes an online backup of the peer and writes it to w. A failure
// after part of it was written is an error too: w then holds no usable
// backup.
func (c *Client) Backup(ctx context.Context, w io.Writer) error {
	if c.baseErr != nil {
		return &Error{Code: CodeBadRequest, Message: c.baseErr.Error()}
	}
	u := *c.base
	u.Path += "/v1/backup"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return fmt.Errorf("POST /v1/backup: %w", err)
	}
	req.Header.Set("Accept", BackupContentType)
	req.Header.Set("Authorization", "Bearer "+c.token)
	// A backup takes as long as the data directory takes to copy: bounded
	// by ctx, not by the client's timeout for calls.
	hc := *c.hc
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("POST /v1/backup: %w", ctx.Err())
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &Error{Code: CodeUnreachable, Message: fmt.Sprintf("cannot reach the peer's API at %s: %v", c.BaseURL(), err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return decodeError(resp.StatusCode, data)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("POST /v1/backup: reading the backup: %w", err)
	}
	return nil
}
