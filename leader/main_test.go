package leader

import (
	"os"
	"testing"

	logging "github.com/ipfs/go-log/v2"
)

func TestMain(m *testing.M) {
	// go-libp2p-raft logs through go-log; a closing connection at the end of
	// a test is not worth an ERROR line on stderr.
	if os.Getenv("COOPGRID_TEST_LOG") == "" {
		_ = logging.SetLogLevel("raftlib", "fatal")
	}
	os.Exit(m.Run())
}
