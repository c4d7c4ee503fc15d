package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
)

// Pages of the lists that grow with the federation (issue 17): GET
// /v1/orgs, /v1/machines and /v1/members take ?limit=&after= as GET
// /v1/tasks does: at most limit items (none: all, as before), those listed
// after the one whose cursor is after. An item's cursor is its key as
// listed — an organisation's name, a machine's ID, a member's peer ID —
// so the next page's cursor is the last item's of this one, and a page
// shorter than its limit is the last. GET /v1/history pages by its own
// cursor (HistoryPage.Next).
//
// The Client's Orgs, Machines, Members and Tasks (without a limit) follow
// the pages themselves, ClientPageSize items at a time, so that no single
// answer carries a whole large federation; the *Page methods fetch one.

// MaxPageLimit is the largest page of a list route.
const MaxPageLimit = 10_000

// ClientPageSize is the page the Client asks for when it follows pages.
const ClientPageSize = 1_000

// PageQuery is one page of a list: at most Limit items (0: all) after the
// one whose cursor is After ("": from the start).
type PageQuery struct {
	After string
	Limit int
}

// maxCursorLen bounds a cursor (a machine ID is an organisation name, "/"
// and a machine name; a peer ID is shorter).
const maxCursorLen = 256

// ValidatePageQuery checks a page's shape.
func ValidatePageQuery(q PageQuery) error {
	if q.Limit < 0 || q.Limit > MaxPageLimit {
		return Errorf(CodeBadRequest, "limit %d: want 1 to %d (0 or none: all)", q.Limit, MaxPageLimit)
	}
	if len(q.After) > maxCursorLen {
		return Errorf(CodeBadRequest, "after: a cursor of %d bytes, more than %d", len(q.After), maxCursorLen)
	}
	return nil
}

// parsePageQuery reads ?limit=&after=, the only parameters of a list
// route besides the route's own others.
func parsePageQuery(r *http.Request, others ...string) (PageQuery, error) {
	if err := checkQuery(r, append([]string{"limit", "after"}, others...)...); err != nil {
		return PageQuery{}, err
	}
	v := r.URL.Query()
	q := PageQuery{After: v.Get("after")}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return PageQuery{}, Errorf(CodeBadRequest, "limit %q: want a whole number", l)
		}
		q.Limit = n
	}
	return q, ValidatePageQuery(q)
}

// pageListed is the page q of items, in their listed order, whose cursors
// key gives: the items after the one whose key is q.After. A cursor that
// names no item (it left the list since the previous page) is bad input:
// the client lists again from the start.
func pageListed[T any](items []T, key func(T) string, q PageQuery) ([]T, error) {
	if q.After != "" {
		i := slices.IndexFunc(items, func(it T) bool { return key(it) == q.After })
		if i < 0 {
			return nil, Errorf(CodeBadRequest, "after %q: no such item in the list now (list again from the start)", q.After)
		}
		items = items[i+1:]
	}
	return limitPage(items, q.Limit), nil
}

// pageSorted is the page q of items sorted by key: those whose key comes
// after q.After, whether or not that item is still listed.
func pageSorted[T any](items []T, key func(T) string, q PageQuery) []T {
	if q.After != "" {
		i, _ := slices.BinarySearchFunc(items, q.After, func(it T, after string) int {
			if k := key(it); k <= after {
				return -1
			}
			return 1
		})
		items = items[i:]
	}
	return limitPage(items, q.Limit)
}

func limitPage[T any](items []T, limit int) []T {
	if limit > 0 && len(items) > limit {
		return items[:limit]
	}
	return items
}

func (q PageQuery) values() url.Values {
	v := url.Values{}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	return v
}

// followPages calls page with ClientPageSize and each next cursor until a
// page comes back short; it returns every item.
func followPages[T any](ctx context.Context, key func(T) string, page func(ctx context.Context, q PageQuery) ([]T, error)) ([]T, error) {
	var out []T
	q := PageQuery{Limit: ClientPageSize}
	for {
		p, err := page(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, p...)
		if len(p) < q.Limit {
			return out, nil
		}
		next := key(p[len(p)-1])
		if next == q.After {
			return nil, fmt.Errorf("list pages: the page after %q ends with it again", next)
		}
		q.After = next
	}
}

func orgKey(o OrgView) string         { return o.Name }
func machineKey(m MachineView) string { return m.ID }
func memberKey(m MemberView) string   { return m.ID }

// Orgs calls GET /v1/orgs page by page and returns every organisation.
func (c *Client) Orgs(ctx context.Context) ([]OrgView, error) {
	return followPages(ctx, orgKey, c.OrgsPage)
}

// OrgsPage calls GET /v1/orgs for one page.
func (c *Client) OrgsPage(ctx context.Context, q PageQuery) ([]OrgView, error) {
	var os []OrgView
	_, err := c.do(ctx, http.MethodGet, "/v1/orgs", q.values(), nil, &os, true)
	return os, err
}

// Machines calls GET /v1/machines page by page and returns every machine.
func (c *Client) Machines(ctx context.Context) ([]MachineView, error) {
	return followPages(ctx, machineKey, c.MachinesPage)
}

// MachinesPage calls GET /v1/machines for one page.
func (c *Client) MachinesPage(ctx context.Context, q PageQuery) ([]MachineView, error) {
	var ms []MachineView
	_, err := c.do(ctx, http.MethodGet, "/v1/machines", q.values(), nil, &ms, true)
	return ms, err
}

// Members calls GET /v1/members page by page: the figures of the last
// page with every member.
func (c *Client) Members(ctx context.Context) (MembersView, error) {
	var last MembersView
	ms, err := followPages(ctx, memberKey, func(ctx context.Context, q PageQuery) ([]MemberView, error) {
		v, err := c.MembersPage(ctx, q)
		last = v
		return v.Members, err
	})
	if err != nil {
		return MembersView{}, err
	}
	last.Members = ms
	return last, nil
}

// MembersPage calls GET /v1/members for one page of members (the figures,
// leader and note are the whole membership's).
func (c *Client) MembersPage(ctx context.Context, q PageQuery) (MembersView, error) {
	var v MembersView
	_, err := c.do(ctx, http.MethodGet, "/v1/members", q.values(), nil, &v, true)
	return v, err
}
