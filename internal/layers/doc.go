// Package layers holds the test that keeps coopgrid's packages importing in
// the documented direction (docs/ARCHITECTURE.md, "Packages and their
// direction"). It has no code of its own: the rules are in layers_test.go,
// read from `go list`, so a new package or a new import against the table
// fails `make test` until the table and the architecture page agree.
package layers
