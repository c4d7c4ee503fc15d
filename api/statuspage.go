package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
)

// Pages of GET /v1/status (issue 17). Its two lists grow with the
// federation, one organisation (and its one peer) at a time, so a page of
// the status is a page of organisations: ?limit=&after= select the
// organisations as GET /v1/orgs does (registration order, cursor: the
// last organisation's name), and the page's peers are those of its
// organisations; peers that have no organisation yet come with the first
// page. The rest of the answer (leader, raft, job policy, retention,
// build) is the whole federation's on every page. Without a limit the
// answer is whole, as before. The Client's Status follows the pages.

// pageStatus cuts st down to the page q.
func pageStatus(st *Status, q PageQuery) error {
	all := st.Orgs
	orgs, err := pageListed(all, orgKey, q)
	if err != nil {
		return err
	}
	inPage := make(map[string]bool, len(orgs))
	for _, o := range orgs {
		inPage[o.Name] = true
	}
	registered := make(map[string]bool, len(all))
	for _, o := range all {
		registered[o.Name] = true
	}
	peers := st.Peers[:0:0]
	for _, p := range st.Peers {
		if inPage[p.Org] || (q.After == "" && !registered[p.Org]) {
			peers = append(peers, p)
		}
	}
	st.Orgs, st.Peers = orgs, peers
	return nil
}

// Status calls GET /v1/status page by page (ClientPageSize organisations
// at a time) and returns the whole status: the last page's figures with
// every organisation and peer.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var (
		out  Status
		orgs []OrgView
		prs  []PeerView
	)
	q := PageQuery{Limit: ClientPageSize}
	for {
		st, version, err := c.statusPage(ctx, q)
		if q.After == "" && refusedAsUnpaged(version, err) {
			// A peer of a build before the status had pages (a rolling
			// upgrade; it advertises no API version): its answer is whole.
			return c.StatusPage(ctx, PageQuery{})
		}
		if err != nil {
			return Status{}, err
		}
		out = st
		orgs, prs = append(orgs, st.Orgs...), append(prs, st.Peers...)
		if len(st.Orgs) < q.Limit {
			break
		}
		next := st.Orgs[len(st.Orgs)-1].Name
		if next == q.After {
			return Status{}, fmt.Errorf("status pages: the page after %q ends with it again", next)
		}
		q.After = next
	}
	// A peer listed on two pages (its organisation registered between
	// them) is kept once, where it came first.
	seen := make(map[string]bool, len(prs))
	prs = slices.DeleteFunc(prs, func(p PeerView) bool {
		dup := seen[p.ID]
		seen[p.ID] = true
		return dup
	})
	out.Orgs, out.Peers = nonNil(orgs), nonNil(prs)
	return out, nil
}

// StatusPage calls GET /v1/status for one page (q.Limit 0: all of it).
func (c *Client) StatusPage(ctx context.Context, q PageQuery) (Status, error) {
	s, _, err := c.statusPage(ctx, q)
	return s, err
}

// statusPage is StatusPage with the API version the peer advertised.
func (c *Client) statusPage(ctx context.Context, q PageQuery) (Status, int, error) {
	var s Status
	_, version, err := c.exchange(ctx, http.MethodGet, "/v1/status", q.values(), nil, &s, true)
	return s, version, err
}
