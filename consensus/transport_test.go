package consensus

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// TestAppendEntriesSenderDecodesTheHeader: the gate's partial decoding of
// an AppendEntries (entries skipped, not built) reads the same sender
// fields as the full request, and leaves the decoder at the end of the
// request, where the next one starts.
func TestAppendEntriesSenderDecodesTheHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  raft.AppendEntriesRequest
	}{
		{"with entries", raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("12D3KooWsender"), Addr: []byte("12D3KooWsender")},
			Term:      7, Leader: []byte("12D3KooWleader"), PrevLogEntry: 41, PrevLogTerm: 7, LeaderCommitIndex: 40,
			Entries: []*raft.Log{{Index: 42, Term: 7, Type: raft.LogCommand, Data: []byte(`{"k":"v"}`)}, {Index: 43, Term: 7, Type: raft.LogNoop}},
		}},
		{"heartbeat", raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("b")}, Term: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			enc := codec.NewEncoder(&buf, &codec.MsgpackHandle{})
			if err := enc.Encode(&tc.req); err != nil {
				t.Fatal(err)
			}
			if err := enc.Encode("next"); err != nil {
				t.Fatal(err)
			}
			dec := codec.NewDecoder(&buf, &codec.MsgpackHandle{})
			var got appendEntriesSender
			if err := dec.Decode(&got); err != nil {
				t.Fatal(err)
			}
			if string(got.ID) != string(tc.req.ID) || string(got.Addr) != string(tc.req.Addr) ||
				string(got.Leader) != string(tc.req.Leader) || got.ProtocolVersion != tc.req.ProtocolVersion { //nolint:staticcheck // Raft still reads Leader
				t.Fatalf("decoded %+v, want the header of %+v", got, tc.req)
			}
			var next string
			if err := dec.Decode(&next); err != nil || next != "next" {
				t.Fatalf("after the request: %q, %v", next, err)
			}
		})
	}
}
