package forge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PullRequest is one open pull (merge) request.
type PullRequest struct {
	Number     int    // GitHub/Gitea number, GitLab iid, Bitbucket id
	Title      string // cut to 1 KiB
	URL        string // its web page; "" unless an http(s) URL of at most 1 KiB
	Author     string // login / username (Bitbucket: nickname, else display_name)
	AuthorID   string // the forge's numeric or uuid id of the author; "" when not given
	HeadBranch string
	HeadSHA    string // as the forge gives it: full, Bitbucket's short
	BaseBranch string
	// HeadRef is the ref to fetch the head from in the base repository: GitHub and Gitea
	// "refs/pull/N/head", GitLab "refs/merge-requests/N/head", Bitbucket
	// "refs/heads/<HeadBranch>" for a pull request of the repository's own branch and ""
	// for a fork (Bitbucket has no refs of pull requests).
	HeadRef string
	Labels  []string // sorted; Bitbucket has none
	Draft   bool
	// Fork: the head is in another repository than the base, or the forge does not say
	// which repositories they are.
	Fork      bool
	UpdatedAt time.Time
}

// MaxPullRequests caps what OpenPullRequests reads (pages stop there).
const MaxPullRequests = 1000

// The bounds of a listing; variables for the tests.
var (
	maxPullRequests = MaxPullRequests
	maxPages        = 50
)

const (
	// maxTitle is where a title is cut.
	maxTitle = 1 << 10
	// maxField bounds the other strings of a pull request.
	maxField = 1 << 10
	// maxLabels bounds a pull request's labels.
	maxLabels = 100
	// Items per page asked of each forge.
	githubPage    = 100
	giteaPage     = 50
	gitlabPage    = 100
	bitbucketPage = 50
)

// OpenPullRequests lists the open pull requests, following the pages of the answer. It
// returns at most MaxPullRequests, sorted by Number, and truncated=true when there were
// more (or more than 50 pages).
func (c *Client) OpenPullRequests(ctx context.Context) (prs []PullRequest, truncated bool, err error) {
	prs, truncated, err = c.openPullRequests(ctx)
	return prs, truncated, c.scrub(err)
}

func (c *Client) openPullRequests(ctx context.Context) ([]PullRequest, bool, error) {
	l := &listing{seen: map[int]bool{}}
	p := c.pullPages()
	for {
		n, prs, next, err := c.pullsPage(ctx, p.target())
		if err != nil {
			return nil, false, err
		}
		for _, pr := range prs {
			l.add(pr)
		}
		if l.more {
			break
		}
		more, err := p.turn(n, next)
		if err != nil {
			return nil, false, err
		}
		if !more {
			break
		}
	}
	slices.SortFunc(l.prs, func(a, b PullRequest) int { return a.Number - b.Number })
	return l.prs, l.more || p.exhausted, nil
}

// listing gathers the pull requests of the pages, once each, up to maxPullRequests.
type listing struct {
	prs  []PullRequest
	seen map[int]bool
	// more: a pull request beyond the cap was seen.
	more bool
}

func (l *listing) add(pr PullRequest) {
	if l.seen[pr.Number] {
		return
	}
	if len(l.prs) >= maxPullRequests {
		l.more = true
		return
	}
	l.seen[pr.Number] = true
	l.prs = append(l.prs, pr)
}

// pullPages is the listing of the open pull requests of the forge.
func (c *Client) pullPages() *pager {
	switch c.kind {
	case GitLab:
		return c.pages(c.repoPath()+"/merge_requests", url.Values{"state": {"opened"}, "per_page": {strconv.Itoa(gitlabPage)}}, gitlabPage)
	case Gitea:
		return c.pages(c.repoPath()+"/pulls", url.Values{"state": {"open"}, "limit": {strconv.Itoa(giteaPage)}}, giteaPage)
	case Bitbucket:
		return c.pages(c.repoPath()+"/pullrequests", url.Values{"state": {"OPEN"}, "pagelen": {strconv.Itoa(bitbucketPage)}}, 0)
	default:
		return c.pages(c.repoPath()+"/pulls", url.Values{"state": {"open"}, "per_page": {strconv.Itoa(githubPage)}}, githubPage)
	}
}

// pullsPage reads one page: the number of items it held, the valid pull requests among
// them, and the link to the next page (Bitbucket).
func (c *Client) pullsPage(ctx context.Context, target string) (int, []PullRequest, string, error) {
	switch c.kind {
	case GitLab:
		var items []gitlabMergeRequest
		err := c.get(ctx, target, &items)
		return len(items), valid(items), "", err
	case Bitbucket:
		var page struct {
			Values []bitbucketPullRequest `json:"values"`
			Next   string                 `json:"next"`
		}
		err := c.get(ctx, target, &page)
		return len(page.Values), valid(page.Values), page.Next, err
	default:
		var items []githubPull
		err := c.get(ctx, target, &items)
		return len(items), valid(items), "", err
	}
}

// item is a pull request as a forge writes it.
type item interface {
	pullRequest() (PullRequest, bool)
}

// valid is the pull requests of items, those to skip left out.
func valid[T item](items []T) []PullRequest {
	var out []PullRequest
	for _, it := range items {
		if pr, ok := it.pullRequest(); ok {
			out = append(out, pr)
		}
	}
	return out
}

// githubPull is a pull request of GitHub or Gitea.
type githubPull struct {
	Number  int    `json:"number"`
	Title   string `json:"title"`
	HTMLURL string `json:"html_url"`
	Draft   bool   `json:"draft"`
	User    *struct {
		Login string `json:"login"`
		ID    jsonID `json:"id"`
	} `json:"user"`
	Labels []struct {
		Name string `json:"name"`
	} `json:"labels"`
	Head      githubBranch `json:"head"`
	Base      githubBranch `json:"base"`
	UpdatedAt string       `json:"updated_at"`
}

type githubBranch struct {
	Ref  string `json:"ref"`
	SHA  string `json:"sha"`
	Repo *struct {
		FullName string `json:"full_name"`
	} `json:"repo"`
}

// fullName is the repository of the branch; "" when not given (a deleted fork).
func (b githubBranch) fullName() string {
	if b.Repo == nil {
		return ""
	}
	return b.Repo.FullName
}

func (p githubPull) pullRequest() (PullRequest, bool) {
	pr := PullRequest{Number: p.Number, Title: p.Title, URL: p.HTMLURL, Draft: p.Draft,
		HeadBranch: p.Head.Ref, HeadSHA: p.Head.SHA, BaseBranch: p.Base.Ref,
		HeadRef:   fmt.Sprintf("refs/pull/%d/head", p.Number),
		Fork:      !sameRepository(p.Head.fullName(), p.Base.fullName()),
		UpdatedAt: parseTime(p.UpdatedAt)}
	if p.User != nil {
		pr.Author, pr.AuthorID = p.User.Login, string(p.User.ID)
	}
	for _, l := range p.Labels {
		pr.Labels = append(pr.Labels, l.Name)
	}
	return checked(pr)
}

// gitlabMergeRequest is a merge request of GitLab.
type gitlabMergeRequest struct {
	IID            int    `json:"iid"`
	Title          string `json:"title"`
	WebURL         string `json:"web_url"`
	Draft          bool   `json:"draft"`
	WorkInProgress bool   `json:"work_in_progress"`
	Author         *struct {
		Username string `json:"username"`
		ID       jsonID `json:"id"`
	} `json:"author"`
	Labels          []string `json:"labels"`
	SourceBranch    string   `json:"source_branch"`
	SHA             string   `json:"sha"`
	TargetBranch    string   `json:"target_branch"`
	SourceProjectID int64    `json:"source_project_id"`
	TargetProjectID int64    `json:"target_project_id"`
	UpdatedAt       string   `json:"updated_at"`
}

func (m gitlabMergeRequest) pullRequest() (PullRequest, bool) {
	pr := PullRequest{Number: m.IID, Title: m.Title, URL: m.WebURL, Draft: m.Draft || m.WorkInProgress,
		HeadBranch: m.SourceBranch, HeadSHA: m.SHA, BaseBranch: m.TargetBranch,
		HeadRef:   fmt.Sprintf("refs/merge-requests/%d/head", m.IID),
		Fork:      m.SourceProjectID == 0 || m.SourceProjectID != m.TargetProjectID,
		Labels:    m.Labels,
		UpdatedAt: parseTime(m.UpdatedAt)}
	if m.Author != nil {
		pr.Author, pr.AuthorID = m.Author.Username, string(m.Author.ID)
	}
	return checked(pr)
}

// bitbucketPullRequest is a pull request of Bitbucket Cloud.
type bitbucketPullRequest struct {
	ID    int    `json:"id"`
	Title string `json:"title"`
	Links struct {
		HTML struct {
			Href string `json:"href"`
		} `json:"html"`
	} `json:"links"`
	Draft  bool `json:"draft"`
	Author *struct {
		Nickname    string `json:"nickname"`
		DisplayName string `json:"display_name"`
		UUID        string `json:"uuid"`
	} `json:"author"`
	Source      bitbucketEnd `json:"source"`
	Destination bitbucketEnd `json:"destination"`
	UpdatedOn   string       `json:"updated_on"`
}

// bitbucketEnd is the source or the destination of a Bitbucket pull request.
type bitbucketEnd struct {
	Branch struct {
		Name string `json:"name"`
	} `json:"branch"`
	Commit *struct {
		Hash string `json:"hash"`
	} `json:"commit"`
	Repository *struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
}

func (e bitbucketEnd) hash() string {
	if e.Commit == nil {
		return ""
	}
	return e.Commit.Hash
}

func (e bitbucketEnd) fullName() string {
	if e.Repository == nil {
		return ""
	}
	return e.Repository.FullName
}

func (p bitbucketPullRequest) pullRequest() (PullRequest, bool) {
	pr := PullRequest{Number: p.ID, Title: p.Title, URL: p.Links.HTML.Href, Draft: p.Draft,
		HeadBranch: p.Source.Branch.Name, HeadSHA: p.Source.hash(), BaseBranch: p.Destination.Branch.Name,
		Fork:      !sameRepository(p.Source.fullName(), p.Destination.fullName()),
		UpdatedAt: parseTime(p.UpdatedOn)}
	if !pr.Fork && pr.HeadBranch != "" {
		pr.HeadRef = "refs/heads/" + pr.HeadBranch
	}
	if p.Author != nil {
		pr.Author, pr.AuthorID = p.Author.Nickname, p.Author.UUID
		if pr.Author == "" {
			pr.Author = p.Author.DisplayName
		}
	}
	return checked(pr)
}

// sameRepository says whether two full names, both given, are one repository.
func sameRepository(a, b string) bool {
	return a != "" && strings.EqualFold(a, b)
}

// checked is pr bounded, or false when it is to be skipped: no positive number, no head
// commit of hexadecimal digits, or an identity longer than maxField.
func checked(pr PullRequest) (PullRequest, bool) {
	if pr.Number <= 0 || !isCommit(pr.HeadSHA) {
		return PullRequest{}, false
	}
	for _, s := range []string{pr.Author, pr.AuthorID, pr.HeadBranch, pr.BaseBranch} {
		if len(s) > maxField {
			return PullRequest{}, false
		}
	}
	pr.Title = cut(pr.Title, maxTitle)
	if !isWebURL(pr.URL) {
		pr.URL = ""
	}
	pr.Labels = labels(pr.Labels)
	return pr, true
}

// isCommit says whether s is a commit's hash, full or short: 7 to 64 hexadecimal digits.
func isCommit(s string) bool {
	if len(s) < 7 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') && (r < 'A' || r > 'F') {
			return false
		}
	}
	return true
}

// isWebURL says whether s is an absolute http(s) URL of at most maxField bytes.
func isWebURL(s string) bool {
	if len(s) > maxField {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// labels is ls without empty and over-long names, sorted, once each, at most maxLabels;
// nil when none is left.
func labels(ls []string) []string {
	var out []string
	for _, l := range ls {
		if l != "" && len(l) <= maxField {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxLabels {
		out = out[:maxLabels]
	}
	return slices.Clip(out)
}

// parseTime reads an RFC 3339 time in UTC; zero when it does not parse.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// jsonID is an id the forge gives as a JSON integer or string (Bitbucket's uuids).
type jsonID string

func (id *jsonID) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*id = jsonID(s)
		return nil
	}
	if _, err := strconv.ParseInt(string(b), 10, 64); err != nil {
		return errors.New("an id is neither an integer nor a string")
	}
	*id = jsonID(b)
	return nil
}
