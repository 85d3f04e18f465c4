package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Comments asked per page of each forge.
const (
	githubCommentPage    = 100
	giteaCommentPage     = 50
	gitlabCommentPage    = 100
	bitbucketCommentPage = 100
)

// comment is a comment of a pull request.
type comment struct {
	id     string
	author string // GitHub/Gitea login, GitLab id, Bitbucket uuid; "" for none
	body   string
}

// UpsertComment makes sure pull request number carries exactly one comment of converge
// holding marker (an HTML comment such as "<!-- converge-preview shop/previews -->" that
// body holds, at its top): it reads the pull request's comments, page by page (at most 50
// pages), for the first holding marker written by the token's own user (asked once per
// Client: GitHub's and Gitea's login, GitLab's id, Bitbucket's uuid), and edits it in
// place when its body differs (line endings and surrounding spaces aside), makes no
// request when not, or creates one. A comment holding marker written by anybody else is
// never edited. It returns the comment's id.
//
// It needs a token. A pull request with 50 pages of comments none of which is converge's
// is an error rather than one more comment.
func (c *Client) UpsertComment(ctx context.Context, number int, marker, body string) (string, error) {
	id, err := c.upsertComment(ctx, number, marker, body)
	return id, c.scrub(err)
}

func (c *Client) upsertComment(ctx context.Context, number int, marker, body string) (string, error) {
	switch {
	case number <= 0:
		return "", fmt.Errorf("pull request number %d: want a positive number", number)
	case marker == "" || !strings.Contains(body, marker):
		return "", errors.New("the comment's body must hold its marker")
	case c.cred == nil:
		return "", fmt.Errorf("%s: commenting needs a token", c.kind)
	}
	me, err := c.whoAmI(ctx)
	if err != nil {
		return "", err
	}
	found, err := c.findComment(ctx, number, marker, me)
	switch {
	case err != nil:
		return "", err
	case found == nil:
		return c.createComment(ctx, number, body)
	case sameBody(found.body, body):
		return found.id, nil
	}
	return found.id, c.editComment(ctx, number, found.id, body)
}

// sameBody says whether two bodies are the same, line endings and surrounding spaces
// aside (a forge may store them otherwise).
func sameBody(a, b string) bool {
	norm := func(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n")) }
	return norm(a) == norm(b)
}

// whoAmI is the token's own user as the forge's comments name their authors.
func (c *Client) whoAmI(ctx context.Context) (string, error) {
	c.mu.Lock()
	me := c.self
	c.mu.Unlock()
	if me != "" {
		return me, nil
	}
	var u struct {
		Login string `json:"login"`
		ID    jsonID `json:"id"`
		UUID  string `json:"uuid"`
	}
	var path string
	switch c.kind {
	case GitLab:
		path = "/api/v4/user"
	case Gitea:
		path = "/api/v1/user"
	case Bitbucket:
		path = "/2.0/user"
	default:
		path = "/user"
	}
	if err := c.get(ctx, c.endpoint(path, nil), &u); err != nil {
		return "", err
	}
	switch c.kind {
	case GitLab:
		me = string(u.ID)
	case Bitbucket:
		me = u.UUID
	default:
		me = u.Login
	}
	if me == "" {
		return "", fmt.Errorf("%s: the forge did not say who the token's user is", c.kind)
	}
	c.mu.Lock()
	c.self = me
	c.mu.Unlock()
	return me, nil
}

// findComment is the first comment of the pull request holding marker by me; nil when
// there is none.
func (c *Client) findComment(ctx context.Context, number int, marker, me string) (*comment, error) {
	p := c.commentPages(number)
	seen := map[string]bool{}
	for {
		n, items, next, err := c.commentsPage(ctx, p.target())
		if err != nil {
			return nil, err
		}
		fresh := 0
		for _, cm := range items {
			if seen[cm.id] {
				continue
			}
			seen[cm.id] = true
			fresh++
			if cm.author != "" && strings.EqualFold(cm.author, me) && strings.Contains(cm.body, marker) {
				return &cm, nil
			}
		}
		if fresh == 0 { // a forge that does not page answers the same page again
			return nil, nil
		}
		more, err := p.turn(n, next)
		switch {
		case err != nil:
			return nil, err
		case p.exhausted:
			return nil, fmt.Errorf("%s: pull request %d has more than %d pages of comments, none of them converge's: not adding one", c.kind, number, maxPages)
		case !more:
			return nil, nil
		}
	}
}

// commentPages is the listing of the comments of pull request number.
func (c *Client) commentPages(number int) *pager {
	path := c.commentsPath(number)
	switch c.kind {
	case GitLab:
		return c.pages(path, url.Values{"per_page": {strconv.Itoa(gitlabCommentPage)}}, gitlabCommentPage)
	case Gitea:
		return c.pages(path, url.Values{"limit": {strconv.Itoa(giteaCommentPage)}}, giteaCommentPage)
	case Bitbucket:
		return c.pages(path, url.Values{"pagelen": {strconv.Itoa(bitbucketCommentPage)}}, 0)
	default:
		return c.pages(path, url.Values{"per_page": {strconv.Itoa(githubCommentPage)}}, githubCommentPage)
	}
}

// commentsPath is the escaped path of the comments of pull request number.
func (c *Client) commentsPath(number int) string {
	switch c.kind {
	case GitLab:
		return fmt.Sprintf("%s/merge_requests/%d/notes", c.repoPath(), number)
	case Bitbucket:
		return fmt.Sprintf("%s/pullrequests/%d/comments", c.repoPath(), number)
	default:
		return fmt.Sprintf("%s/issues/%d/comments", c.repoPath(), number)
	}
}

// commentsPage reads one page of comments: the number of items it held, its comments
// (without an author when it is a system note, deleted, or of a deleted user: never
// converge's), and the link to the next page (Bitbucket).
func (c *Client) commentsPage(ctx context.Context, target string) (int, []comment, string, error) {
	switch c.kind {
	case GitLab:
		return c.gitlabNotes(ctx, target)
	case Bitbucket:
		return c.bitbucketComments(ctx, target)
	default:
		return c.issueComments(ctx, target)
	}
}

// gitlabNotes reads a page of a merge request's notes; a system note has no author.
func (c *Client) gitlabNotes(ctx context.Context, target string) (int, []comment, string, error) {
	var notes []struct {
		ID     int64  `json:"id"`
		Body   string `json:"body"`
		System bool   `json:"system"`
		Author *struct {
			ID jsonID `json:"id"`
		} `json:"author"`
	}
	if err := c.get(ctx, target, &notes); err != nil {
		return 0, nil, "", err
	}
	out := make([]comment, 0, len(notes))
	for _, n := range notes {
		cm := comment{id: formatID(n.ID), body: n.Body}
		if !n.System && n.Author != nil {
			cm.author = string(n.Author.ID)
		}
		out = append(out, cm)
	}
	return len(notes), out, "", c.checkIDs(out)
}

// bitbucketComments reads a page of a pull request's comments and the link to the next.
func (c *Client) bitbucketComments(ctx context.Context, target string) (int, []comment, string, error) {
	var page struct {
		Values []struct {
			ID      int64 `json:"id"`
			Deleted bool  `json:"deleted"`
			Content struct {
				Raw string `json:"raw"`
			} `json:"content"`
			User *struct {
				UUID string `json:"uuid"`
			} `json:"user"`
		} `json:"values"`
		Next string `json:"next"`
	}
	if err := c.get(ctx, target, &page); err != nil {
		return 0, nil, "", err
	}
	out := make([]comment, 0, len(page.Values))
	for _, v := range page.Values {
		cm := comment{id: formatID(v.ID), body: v.Content.Raw}
		if !v.Deleted && v.User != nil {
			cm.author = v.User.UUID
		}
		out = append(out, cm)
	}
	return len(page.Values), out, page.Next, c.checkIDs(out)
}

// issueComments reads a page of an issue's comments (GitHub, Gitea).
func (c *Client) issueComments(ctx context.Context, target string) (int, []comment, string, error) {
	var items []struct {
		ID   int64  `json:"id"`
		Body string `json:"body"`
		User *struct {
			Login string `json:"login"`
		} `json:"user"`
	}
	if err := c.get(ctx, target, &items); err != nil {
		return 0, nil, "", err
	}
	out := make([]comment, 0, len(items))
	for _, it := range items {
		cm := comment{id: formatID(it.ID), body: it.Body}
		if it.User != nil {
			cm.author = it.User.Login
		}
		out = append(out, cm)
	}
	return len(items), out, "", c.checkIDs(out)
}

// formatID is a comment's id as a string; "" when not positive.
func formatID(id int64) string {
	if id <= 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}

// checkIDs refuses comments without an id: none could be edited.
func (c *Client) checkIDs(cs []comment) error {
	for _, cm := range cs {
		if cm.id == "" {
			return fmt.Errorf("malformed answer from %s: a comment without an id", c.kind)
		}
	}
	return nil
}

// commentBody is the JSON body of a comment's creation or edit.
func (c *Client) commentBody(body string) any {
	if c.kind == Bitbucket {
		return map[string]any{"content": map[string]string{"raw": body}}
	}
	return map[string]string{"body": body}
}

// createComment writes a new comment on pull request number.
func (c *Client) createComment(ctx context.Context, number int, body string) (string, error) {
	var created struct {
		ID int64 `json:"id"`
	}
	if err := c.call(ctx, http.MethodPost, c.endpoint(c.commentsPath(number), nil), c.commentBody(body), &created); err != nil {
		return "", err
	}
	id := formatID(created.ID)
	if id == "" {
		return "", fmt.Errorf("malformed answer from %s: the new comment has no id", c.kind)
	}
	return id, nil
}

// editComment replaces the body of comment id of pull request number.
func (c *Client) editComment(ctx context.Context, number int, id, body string) error {
	method, path := http.MethodPut, c.commentsPath(number)+"/"+id
	if c.kind == GitHub || c.kind == Gitea {
		method, path = http.MethodPatch, c.repoPath()+"/issues/comments/"+id
	}
	return c.call(ctx, method, c.endpoint(path, nil), c.commentBody(body), nil)
}
