package api

import (
	"errors"
	"net/http"
	"strconv"
)

// Every answer of this API, error answers and 401s included, carries the
// header APIVersionHeader: the version of the API the answering peer
// serves. A client that needs a feature newer than version 1 reads it
// there rather than guessing from an error's wording, so that a rolling
// upgrade (a new CLI talking to an old peer) is recognised by what the
// peer advertises. The versions:
//
//	1  (no header) the peers before session 9: GET /v1/status and
//	   /v1/timeline answer whole and refuse ?limit= and ?after=
//	2  GET /v1/status and /v1/timeline take ?limit=&after= (statuspage.go,
//	   timeline.go)
//
// Raise APIVersion, and add a line above, when a route gains something a
// client must not ask an older peer for.
const (
	APIVersionHeader = "Coopgrid-Api-Version"
	APIVersion       = 2
)

// apiVersionPagedStatus is the first version whose status and timeline
// take pages.
const apiVersionPagedStatus = 2

// peerAPIVersion is the version an answer's headers advertise: 1 when
// they advertise none (a peer built before the header) or nothing
// readable.
func peerAPIVersion(h http.Header) int {
	v, err := strconv.Atoi(h.Get(APIVersionHeader))
	if err != nil || v < 1 {
		return 1
	}
	return v
}

// refusedAsUnpaged reports whether err, the answer to a first page asked
// of a peer advertising version, is an older peer's refusal of the paging
// parameters: a bad_request from a peer whose API has no pages on that
// route. The client then asks for the whole answer once; a newer peer's
// refusal is a real one and is returned.
func refusedAsUnpaged(version int, err error) bool {
	var e *Error
	return version >= 1 && version < apiVersionPagedStatus &&
		errors.As(err, &e) && e.Code == CodeBadRequest
}
