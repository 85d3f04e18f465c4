package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// userAgent names converge to the forge.
	userAgent = "converge"
	// maxMessage bounds the forge's message quoted in an error.
	maxMessage = 200
	// maxLink bounds a "next" link.
	maxLink = 4 << 10
)

// maxBody caps the body of every answer; a variable for the tests.
var maxBody int64 = 8 << 20

// statusError is an answer outside 2xx.
type statusError struct {
	kind    Kind
	method  string
	path    string
	code    int
	message string
}

func (e *statusError) Error() string {
	s := fmt.Sprintf("%s: %s %s: %d %s", e.kind, e.method, e.path, e.code, http.StatusText(e.code))
	if e.message != "" {
		s += ": " + e.message
	}
	return s
}

// hasStatus says whether err is an answer with one of codes.
func hasStatus(err error, codes ...int) bool {
	var se *statusError
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range codes {
		if se.code == c {
			return true
		}
	}
	return false
}

// get asks target and decodes its JSON answer into out.
func (c *Client) get(ctx context.Context, target string, out any) error {
	return c.call(ctx, http.MethodGet, target, nil, out)
}

// call sends one request with in as its JSON body (none when nil) and decodes a 2xx
// answer's JSON into out (when not nil).
func (c *Client) call(ctx context.Context, method, target string, in, out any) error {
	req, err := c.newRequest(ctx, method, target, in)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", c.kind, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, readErr := readCapped(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &statusError{kind: c.kind, method: method, path: pathOf(req), code: resp.StatusCode,
			message: c.forgeMessage(raw)}
	}
	if readErr != nil {
		return fmt.Errorf("%s: %s %s: %w", c.kind, method, pathOf(req), readErr)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("malformed answer from %s to %s %s: %v", c.kind, method, pathOf(req), err)
	}
	return nil
}

// pathOf is the path of req for a message, cut to maxMessage bytes.
func pathOf(req *http.Request) string {
	return cut(req.URL.EscapedPath(), maxMessage)
}

// newRequest is a request to target, which must be on the client's origin, with the
// forge's headers and the token.
func (c *Client) newRequest(ctx context.Context, method, target string, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.kind, err)
	}
	if origin(req.URL) != c.origin || req.URL.User != nil {
		return nil, fmt.Errorf("%s: refusing to send a request to %s: not the forge's API origin %s", c.kind, cut(req.URL.Scheme+"://"+req.URL.Host, maxMessage), c.origin)
	}
	h := req.Header
	h.Set("User-Agent", userAgent)
	if c.kind == GitHub {
		h.Set("Accept", "application/vnd.github+json")
		h.Set("X-GitHub-Api-Version", "2022-11-28")
	} else {
		h.Set("Accept", "application/json")
	}
	if in != nil {
		h.Set("Content-Type", "application/json")
	}
	if c.cred != nil {
		h.Set(c.cred.header, c.cred.value)
	}
	return req, nil
}

// readCapped reads r up to maxBody bytes; beyond, what was read and an error.
func readCapped(r io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return raw, err
	}
	if int64(len(raw)) > maxBody {
		return raw[:maxBody], fmt.Errorf("the answer is larger than the cap of %d bytes", maxBody)
	}
	return raw, nil
}

// forgeMessage is the message of an error answer, on one line, without the token, cut to
// maxMessage bytes: the JSON "message" (GitHub, Gitea, GitLab), "error" and
// "error_description" (GitLab's OAuth), "error.message" (Bitbucket), else the body.
func (c *Client) forgeMessage(raw []byte) string {
	msg := string(raw)
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) == nil {
		if m := messageOf(fields); m != "" {
			msg = m
		}
	}
	return cut(oneLine(c.redact(msg)), maxMessage)
}

// messageOf finds the message in the fields of an error answer.
func messageOf(fields map[string]json.RawMessage) string {
	var s string
	if json.Unmarshal(fields["message"], &s) == nil && s != "" {
		return s
	}
	if m, ok := fields["message"]; ok && string(m) != "null" {
		return string(m) // GitLab's validation errors: an object or a list
	}
	if json.Unmarshal(fields["error"], &s) == nil && s != "" {
		var d string
		if json.Unmarshal(fields["error_description"], &d) == nil && d != "" {
			return s + ": " + d
		}
		return s
	}
	var nested struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(fields["error"], &nested) == nil {
		return nested.Message
	}
	return ""
}

// oneLine is s with runs of spaces and control characters made one space, and invalid
// UTF-8 replaced.
func oneLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
}

// cut is s cut to at most n bytes on a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// pager walks the pages of one listing: numbered pages (page=N) of size items, or the
// "next" links of the pages when size is 0 (Bitbucket). It stops after maxPages.
type pager struct {
	c     *Client
	path  string
	query url.Values
	size  int
	page  int
	next  string
	// exhausted: the listing went on beyond maxPages.
	exhausted bool
}

// pages starts a listing of path with query q.
func (c *Client) pages(path string, q url.Values, size int) *pager {
	return &pager{c: c, path: path, query: q, size: size, page: 1, next: c.endpoint(path, q)}
}

// target is the URL of the current page.
func (p *pager) target() string {
	if p.size == 0 {
		return p.next
	}
	q := url.Values{}
	for k, v := range p.query {
		q[k] = v
	}
	q.Set("page", fmt.Sprint(p.page))
	return p.c.endpoint(p.path, q)
}

// turn moves past a page of n items whose "next" link is next; false when there is no
// page after it, or none may be read.
func (p *pager) turn(n int, next string) (bool, error) {
	more := next != ""
	if p.size > 0 {
		more = n >= p.size
	}
	if !more {
		return false, nil
	}
	if p.page >= maxPages {
		p.exhausted = true
		return false, nil
	}
	p.page++
	if p.size == 0 {
		u, err := p.c.sameOrigin(next)
		if err != nil {
			return false, err
		}
		p.next = u
	}
	return true, nil
}

// sameOrigin is link, a page's "next" link, when it is an absolute URL on the client's
// origin.
func (c *Client) sameOrigin(link string) (string, error) {
	u, err := url.Parse(link)
	if err != nil || len(link) > maxLink || !u.IsAbs() || u.User != nil || origin(u) != c.origin {
		host := "an unreadable URL"
		if err == nil {
			host = cut(u.Scheme+"://"+u.Host, maxMessage)
		}
		return "", fmt.Errorf("%s: refusing the next page at %s: not the forge's API origin %s", c.kind, host, c.origin)
	}
	return u.String(), nil
}
