package consensus

import (
	"path/filepath"
	"testing"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// TestRaftDBIsFound: the node reaches raft.db's bbolt handle inside
// raft-boltdb's store, which it needs to release the file's memory map
// (raftmap.go); another version of raft-boltdb may move it.
func TestRaftDBIsFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), RaftDBFile)
	s, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := raftDB(s)
	if db == nil {
		t.Fatal("no bbolt handle found in raft-boltdb's store: raft.db's memory map is never released")
	}
	if db.Path() != path {
		t.Fatalf("found the handle of %s, want %s", db.Path(), path)
	}
	if raftDB(nil) != nil {
		t.Fatal("a handle for no store")
	}
}
