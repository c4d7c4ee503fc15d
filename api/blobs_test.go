package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestPackAndResolveBlobs(t *testing.T) {
	shared := bytes.Repeat([]byte("x"), 1000)
	copyOfShared := append([]byte(nil), shared...)
	req := api.SubmitRequest{Job: "j"}
	for i := range 50 {
		req.Tasks = append(req.Tasks, api.SubmitTask{Argv: []string{"a"}, SizeMFlop: 1, WallLimitMs: 1, Inputs: []api.InputFile{
			{Name: "shared", Data: shared},
			{Name: "own", Data: []byte(fmt.Sprint(i))},
			{Name: "empty"},
		}})
	}
	// Equal contents in another slice still travel once.
	req.Tasks[7].Inputs[0].Data = copyOfShared

	packed := api.PackBlobs(req)
	if len(packed.Blobs) != 51 {
		t.Errorf("%d blobs, want 51 (one shared, 50 own)", len(packed.Blobs))
	}
	for _, task := range packed.Tasks {
		if in := task.Inputs[0]; in.Data != nil || in.Digest != hexSum(shared) {
			t.Fatalf("packed input %+v", in)
		}
		if in := task.Inputs[2]; in.Digest != "" || len(in.Data) != 0 {
			t.Fatalf("empty input packed: %+v", in)
		}
	}
	if req.Tasks[0].Inputs[0].Data == nil || req.Tasks[0].Inputs[0].Digest != "" || req.Blobs != nil {
		t.Error("PackBlobs modified its argument")
	}

	if err := api.ResolveBlobs(&packed); err != nil {
		t.Fatal(err)
	}
	if packed.Blobs != nil {
		t.Error("Blobs not cleared")
	}
	for i, task := range packed.Tasks {
		for j, in := range task.Inputs {
			want := req.Tasks[i].Inputs[j]
			if !bytes.Equal(in.Data, want.Data) || in.Name != want.Name || in.Digest != hexSum(want.Data) {
				t.Fatalf("task %d input %d: %+v, want %+v", i, j, in, want)
			}
		}
	}
	// The digests reach the ledger's spec unchanged.
	specs := apiconv.SubmitTasks(packed, "").Tasks
	if specs[3].Spec.InputDigests[1] != hexSum([]byte("3")) || specs[3].Spec.InputDigests[2] != hexSum(nil) {
		t.Errorf("digests %v", specs[3].Spec.InputDigests)
	}
}

func TestResolveBlobsRejects(t *testing.T) {
	data := []byte("hello")
	d := hexSum(data)
	task := func(ins ...api.InputFile) []api.SubmitTask {
		return []api.SubmitTask{{Argv: []string{"a"}, SizeMFlop: 1, WallLimitMs: 1, Inputs: ins}}
	}
	for _, tc := range []struct {
		name string
		req  api.SubmitRequest
		err  string
	}{
		{"bad key", api.SubmitRequest{Tasks: task(api.InputFile{Name: "a", Digest: "ABC"}), Blobs: map[string][]byte{"ABC": data}}, `key "ABC"`},
		{"mismatch", api.SubmitRequest{Tasks: task(api.InputFile{Name: "a", Digest: d}), Blobs: map[string][]byte{d: []byte("hellO")}}, "do not match"},
		{"missing", api.SubmitRequest{Tasks: task(api.InputFile{Name: "a", Digest: d})}, "not among the blobs"},
		{"both", api.SubmitRequest{Tasks: task(api.InputFile{Name: "a", Digest: d, Data: data}), Blobs: map[string][]byte{d: data}}, "not both"},
		{"unused", api.SubmitRequest{Tasks: task(api.InputFile{Name: "a", Data: data}), Blobs: map[string][]byte{d: data}}, "not used"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := api.ResolveBlobs(&tc.req)
			if api.CodeOf(err) != api.CodeBadRequest || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v, want bad_request %q", err, tc.err)
			}
		})
	}
}

// TestSubmitSharedInputOnce: 200 tasks shipping the same 100 KiB file fit
// a 1 MiB submission limit, because the file travels once; the backend
// sees every task with its data.
func TestSubmitSharedInputOnce(t *testing.T) {
	b, srv := serve(t, api.ServerOptions{MaxSubmitBytes: 1 << 20})
	shared := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	req := api.SubmitRequest{Job: "many"}
	for i := range 200 {
		req.Tasks = append(req.Tasks, api.SubmitTask{Name: fmt.Sprint("t", i), Argv: []string{"/bin/sh", "in.sh"}, SizeMFlop: 1, WallLimitMs: 1000, Inputs: []api.InputFile{{Name: "in.sh", Data: shared}}})
	}
	c := api.NewClient(srv.URL, token, srv.Client())
	resp, err := c.Submit(context.Background(), req)
	if err != nil || len(resp.TaskIDs) != 200 {
		t.Fatalf("submit: %v (%d IDs)", err, len(resp.TaskIDs))
	}
	in := b.Inputs(resp.TaskIDs[199])
	if len(in) != 1 || !bytes.Equal(in[0].Data, shared) || in[0].Digest != hexSum(shared) {
		t.Errorf("last task's input: %d bytes, digest %s", len(in[0].Data), in[0].Digest)
	}
	// Sent inline, the same request is far over the limit.
	r := call(t, srv, "POST", "/v1/tasks", mustJSON(t, req))
	if e := apiError(t, r); r.status != 413 || e.Code != api.CodeTooLarge {
		t.Errorf("inline: %d %+v", r.status, e)
	}
	// A blob that does not match its digest is refused whole.
	bad := `{"tasks":[{"argv":["a"],"size_mflop":1,"wall_limit_ms":1,"inputs":[{"name":"x","digest":"` + hexSum([]byte("a")) + `"}]}],"blobs":{"` + hexSum([]byte("a")) + `":"Yg=="}}`
	r = call(t, srv, "POST", "/v1/tasks", bad)
	if e := apiError(t, r); r.status != 400 || !strings.Contains(e.Message, "do not match") {
		t.Errorf("bad blob: %d %+v", r.status, e)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
