package api_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// TestClientRoundTrips: every client method returns exactly what the
// backend answers directly.
func TestClientRoundTrips(t *testing.T) {
	ctx := context.Background()
	b, srv := serve(t, api.ServerOptions{})
	c := api.NewClient(srv.URL+"/", token, srv.Client()) // a trailing slash is fine

	if err := c.Health(ctx); err != nil {
		t.Errorf("health: %v", err)
	}
	same := func(name string, got, want any, gerr, werr error) {
		t.Helper()
		if gerr != nil || werr != nil {
			t.Errorf("%s: client %v, backend %v", name, gerr, werr)
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\nclient  %+v\nbackend %+v", name, got, want)
		}
	}
	gs, gerr := c.Status(ctx)
	ws, werr := b.Status(ctx)
	build := api.ReadBuild("", "") // the server adds its build
	ws.Build = &build
	same("status", gs, ws, gerr, werr)
	go_, gerr := c.Orgs(ctx)
	wo, werr := b.Orgs(ctx)
	same("orgs", go_, wo, gerr, werr)
	gm, gerr := c.Machines(ctx)
	wm, werr := b.Machines(ctx)
	same("machines", gm, wm, gerr, werr)
	for _, q := range []api.TaskQuery{{}, {Org: "beta"}, {States: []string{"queued", "done"}}, {Limit: 2}} {
		gt, gerr := c.Tasks(ctx, q)
		wt, werr := b.Tasks(ctx, q)
		same("tasks", gt, wt, gerr, werr)
	}
	gd, gerr := c.Task(ctx, "alpha-1")
	wd, werr := b.Task(ctx, "alpha-1")
	same("task", gd, wd, gerr, werr)
	gl, gerr := c.Ledger(ctx)
	wl, werr := b.Ledger(ctx)
	same("ledger", gl, wl, gerr, werr)
	logs, err := c.Logs(ctx, "alpha-1", "")
	if err != nil || string(logs) != "hello from alpha-1\n" {
		t.Errorf("logs %q %v", logs, err)
	}
	logs, err = c.Logs(ctx, "alpha-1", api.StreamStderr)
	if err != nil || string(logs) != "warning: nothing\n" {
		t.Errorf("stderr %q %v", logs, err)
	}

	// Writes.
	bin := []byte{0, 1, 2, 0xff, '\n'}
	resp, err := c.Submit(ctx, api.SubmitRequest{Job: "j", Tasks: []api.SubmitTask{
		{Name: "a", Argv: []string{"/bin/cat", "in.bin"}, SizeMFlop: 2500, WallLimitMs: 1000, Inputs: []api.InputFile{{Name: "in.bin", Data: bin}}},
	}})
	if err != nil || !reflect.DeepEqual(resp.TaskIDs, []string{"alpha-4"}) {
		t.Fatalf("submit %v %v", resp, err)
	}
	if in := b.Inputs("alpha-4"); len(in) != 1 || !reflect.DeepEqual(in[0].Data, bin) {
		t.Errorf("binary input did not survive: %+v", in)
	}
	if err := c.Cancel(ctx, "alpha-4"); err != nil {
		t.Errorf("cancel: %v", err)
	}
	if d, _ := b.Task(ctx, "alpha-4"); d.State != "cancelled" {
		t.Errorf("alpha-4 %s", d.State)
	}
	w := 900.0
	o, err := c.SetLimit(ctx, api.LimitRequest{Watts: &w})
	if err != nil || o.LimitW != 900 {
		t.Errorf("limit %+v %v", o, err)
	}
	if err := c.Leave(ctx); err != nil || !b.Left() {
		t.Errorf("leave %v, left %v", err, b.Left())
	}
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	_, srv := serve(t, api.ServerOptions{})
	c := api.NewClient(srv.URL, token, srv.Client())

	t.Run("codes preserved", func(t *testing.T) {
		for _, tc := range []struct {
			call   func() error
			code   string
			status int
			msg    string
		}{
			{func() error { _, err := c.Task(ctx, "alpha-99"); return err }, api.CodeNotFound, 404, `no task "alpha-99"`},
			{func() error { return c.Cancel(ctx, "beta-1") }, api.CodeForbidden, 403, "belongs to"},
			{func() error { _, err := c.Tasks(ctx, api.TaskQuery{States: []string{"zombie"}}); return err }, api.CodeBadRequest, 400, "zombie"},
			{func() error { _, err := c.Logs(ctx, "alpha-1", "stdin"); return err }, api.CodeBadRequest, 400, "stdin"},
			{func() error { w := 1.0; _, err := c.SetLimit(ctx, api.LimitRequest{Watts: &w}); return err }, api.CodeConflict, 409, "limit_exceeded"},
			{func() error { _, err := c.Submit(ctx, api.SubmitRequest{}); return err }, api.CodeBadRequest, 400, "no tasks"},
			{func() error { _, err := c.Task(ctx, "x/y"); return err }, api.CodeBadRequest, 400, "task ID"},
		} {
			err := tc.call()
			var e *api.Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Status != tc.status || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("got %#v, want %s %d containing %q", err, tc.code, tc.status, tc.msg)
			}
			if api.CodeOf(err) != tc.code {
				t.Errorf("CodeOf %q", api.CodeOf(err))
			}
		}
	})
	t.Run("bad token", func(t *testing.T) {
		_, err := api.NewClient(srv.URL, "wrong", srv.Client()).Status(ctx)
		if api.CodeOf(err) != api.CodeUnauthorized {
			t.Errorf("err %v", err)
		}
		// /healthz needs no token.
		if err := api.NewClient(srv.URL, "", nil).Health(ctx); err != nil {
			t.Errorf("health without token: %v", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		// A port that was just free: nothing listens there.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = api.NewClient(addr, token, nil).Status(ctx)
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeUnreachable || !strings.Contains(e.Message, "http://"+addr) {
			t.Errorf("err %#v", err)
		}
	})
	t.Run("cancelled context is not unreachable", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := c.Status(cctx)
		if !errors.Is(err, context.Canceled) || api.CodeOf(err) != "" {
			t.Errorf("err %v", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		// A server that accepts and never answers: the caller's deadline ends it.
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
		defer slow.Close()
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := api.NewClient(slow.URL, token, nil).Orgs(tctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v", err)
		}
	})
	t.Run("not the API", func(t *testing.T) {
		// Another program on the port answers in plain text: the status
		// still picks the code.
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "nothing here", http.StatusNotFound)
		}))
		defer other.Close()
		_, err := api.NewClient(other.URL, token, nil).Status(ctx)
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeNotFound || !strings.Contains(e.Message, "nothing here") {
			t.Errorf("err %#v", err)
		}
		garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("<html>")) }))
		defer garbage.Close()
		if _, err := api.NewClient(garbage.URL, token, nil).Status(ctx); err == nil || !strings.Contains(err.Error(), "decode answer") {
			t.Errorf("garbage 200: %v", err)
		}
	})
	t.Run("answer too large", func(t *testing.T) {
		small := api.NewClient(srv.URL, token, srv.Client())
		small.MaxResponseBytes = 100
		if _, err := small.Status(ctx); err == nil || !strings.Contains(err.Error(), "larger than 100 bytes") {
			t.Errorf("err %v", err)
		}
	})
	t.Run("bad base URL", func(t *testing.T) {
		_, err := api.NewClient("ftp://x", token, nil).Status(ctx)
		if api.CodeOf(err) != api.CodeBadRequest {
			t.Errorf("err %v", err)
		}
	})
}

func TestParseBaseURL(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"127.0.0.1:9441", "http://127.0.0.1:9441", ""},
		{"http://localhost:1/", "http://localhost:1", ""},
		{"https://h.example/api/", "https://h.example/api", ""},
		{"[::1]:9441", "http://[::1]:9441", ""},
		{"ftp://h", "", "want host:port"},
		{"http://", "", "no host"},
		{"http://h/?x=1", "", "no user, query"},
		{"http://u:p@h", "", "no user, query"},
		{"http://h:bad", "", "invalid port"},
	} {
		got, err := api.ParseBaseURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestClientIsBackend: a server over a Client of another server answers
// like the first one, errors included, so the client loses nothing of
// the contract.
func TestClientIsBackend(t *testing.T) {
	ctx := context.Background()
	_, inner := serve(t, api.ServerOptions{})
	outer := serveBackend(t, api.NewClient(inner.URL, token, inner.Client()), api.ServerOptions{Token: "outer-token"})
	direct := api.NewClient(inner.URL, token, nil)
	proxied := api.NewClient(outer.URL, "outer-token", nil)
	ws, _ := direct.Status(ctx)
	gs, err := proxied.Status(ctx)
	if err != nil || !reflect.DeepEqual(gs, ws) {
		t.Errorf("status through the proxy %+v %v", gs, err)
	}
	if _, err := proxied.Task(ctx, "alpha-99"); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("not found through the proxy: %v", err)
	}
	if err := proxied.Cancel(ctx, "beta-1"); api.CodeOf(err) != api.CodeForbidden {
		t.Errorf("forbidden through the proxy: %v", err)
	}
}

// TestServeShutdown runs the server on a real listener and stops it
// through its context.
func TestServeShutdown(t *testing.T) {
	b, err := apitest.NewSeeded(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := api.NewServer(b, api.ServerOptions{Token: token})
	ln, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	c := api.NewClient(ln.Addr().String(), token, nil)
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("status while serving: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
	if _, err := c.Status(context.Background()); api.CodeOf(err) != api.CodeUnreachable {
		t.Errorf("status after shutdown: %v", err)
	}
	// The port is taken while in use: a second Listen on it fails clearly.
	ln2, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if _, err := s.Listen(ln2.Addr().String()); err == nil || !strings.Contains(err.Error(), "api: listen on") {
		t.Errorf("listen on a busy port: %v", err)
	}
}
