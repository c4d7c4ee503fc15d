package consensus

import "github.com/hashicorp/raft"

// noPipeline is the Raft transport with pipelined replication turned off:
// the leader sends a follower one AppendEntries at a time. hashicorp/raft
// v1.7.3's pipeline can deadlock the leader's replication to a follower
// that answers Success=false while another request is in flight (its
// decoder exits, the send loop then parks on the pipeline's unbuffered
// in-flight channel, and the deferred Close that would free it never
// runs); heartbeats keep flowing, so the follower never times out and
// never receives another entry until the leader restarts
// (hashicorp/raft#612). The chaos harness's full disk hit it in about
// one run in three: a follower whose store refused writes stayed behind
// forever after the space came back. go-libp2p-raft builds the
// NetworkTransport without a way to set MaxRPCsInFlight (1 would turn
// pipelining off too), hence the wrapper; HashiCorp measured pipelining
// to bring nothing on low-latency networks (hashicorp/raft#541).
type noPipeline struct{ *raft.NetworkTransport }

// AppendEntriesPipeline tells Raft to replicate without a pipeline.
func (noPipeline) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}
