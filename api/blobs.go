package api

import (
	"crypto/sha256"
	"encoding/hex"
)

// digestOf is the sha256 of data in lowercase hex, the form of
// InputFile.Digest and ledger.Spec.InputDigests.
func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// sliceKey identifies a byte slice by its memory, so that the many tasks
// of a job sharing one input's bytes (as jobfile gives them) are hashed
// once.
type sliceKey struct {
	p *byte
	n int
}

// PackBlobs returns req with every non-empty input's contents moved to
// Blobs, once per distinct content, and referenced by Digest: a job whose
// thousand tasks ship the same file sends it once. req is not modified;
// the contents are shared, not copied.
func PackBlobs(req SubmitRequest) SubmitRequest {
	out := SubmitRequest{Job: req.Job, RequestID: req.RequestID, Tasks: make([]SubmitTask, len(req.Tasks))}
	known := map[sliceKey]string{}
	for i, t := range req.Tasks {
		out.Tasks[i] = t
		if len(t.Inputs) == 0 {
			continue
		}
		ins := make([]InputFile, len(t.Inputs))
		for j, in := range t.Inputs {
			ins[j] = in
			if len(in.Data) == 0 {
				continue
			}
			k := sliceKey{&in.Data[0], len(in.Data)}
			d, ok := known[k]
			if !ok {
				d = digestOf(in.Data)
				known[k] = d
			}
			if out.Blobs == nil {
				out.Blobs = map[string][]byte{}
			}
			out.Blobs[d] = in.Data
			ins[j] = InputFile{Name: in.Name, Digest: d}
		}
		out.Tasks[i].Inputs = ins
	}
	for k, v := range req.Blobs {
		if out.Blobs == nil {
			out.Blobs = map[string][]byte{}
		}
		out.Blobs[k] = v
	}
	return out
}

// ResolveBlobs fills in the Data of every input that gives a Digest from
// req.Blobs, after checking each blob against its digest, and clears
// Blobs. Inline inputs get their Digest too, so that every input of the
// result carries a checked digest. An input with both Data and Digest, a
// digest without a blob, a blob that does not match its digest or that no
// input uses is a bad_request.
func ResolveBlobs(req *SubmitRequest) error {
	for d, data := range req.Blobs {
		if !validDigest(d) {
			return Errorf(CodeBadRequest, "blobs: key %q: want a sha256 in lowercase hex", d)
		}
		if digestOf(data) != d {
			return Errorf(CodeBadRequest, "blobs: the contents of %s do not match their digest", d)
		}
	}
	used := make(map[string]bool, len(req.Blobs))
	known := map[sliceKey]string{}
	for i := range req.Tasks {
		ins := req.Tasks[i].Inputs
		for j := range ins {
			in := &ins[j]
			if in.Digest == "" {
				if len(in.Data) > 0 {
					k := sliceKey{&in.Data[0], len(in.Data)}
					if known[k] == "" {
						known[k] = digestOf(in.Data)
					}
					in.Digest = known[k]
				} else {
					in.Digest = digestOf(nil)
				}
				continue
			}
			if len(in.Data) > 0 {
				return Errorf(CodeBadRequest, "tasks[%d]: inputs[%d] %q: give data or digest, not both", i, j, in.Name)
			}
			data, ok := req.Blobs[in.Digest]
			if !ok {
				return Errorf(CodeBadRequest, "tasks[%d]: inputs[%d] %q: digest %q is not among the blobs", i, j, in.Name, in.Digest)
			}
			in.Data = data
			used[in.Digest] = true
		}
	}
	for d := range req.Blobs {
		if !used[d] {
			return Errorf(CodeBadRequest, "blobs: %s is not used by any input", d)
		}
	}
	req.Blobs = nil
	return nil
}

func validDigest(d string) bool {
	if len(d) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(d); i++ {
		if c := d[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
