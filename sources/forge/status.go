package forge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// StatusState is a commit status's state, in converge's words; each forge is sent its own.
type StatusState string

// The states of a commit status.
const (
	StatusPending StatusState = "pending"
	StatusSuccess StatusState = "success"
	StatusFailure StatusState = "failure"
)

// Status is a commit status.
type Status struct {
	State StatusState
	// Context names the status among the commit's others: GitHub's and Gitea's
	// "context", GitLab's "name", Bitbucket's "name" and "key" (Bitbucket's keys are at
	// most 40 characters: a longer Context is shortened, see bitbucketKey). At most 1 KiB.
	Context string
	// Description is cut to 140 characters (GitHub's limit), on a character boundary.
	Description string
	// TargetURL is optional; it is sent only when it is an http(s) URL of at most 1 KiB,
	// else dropped.
	TargetURL string
}

const (
	// maxDescription is where a status's description is cut, in characters.
	maxDescription = 140
	// maxBitbucketKey is the longest key of a Bitbucket status, in characters.
	maxBitbucketKey = 40
	// keyHash is how many hexadecimal digits of its hash end a shortened Bitbucket key.
	keyHash = 12
	// gitlabAlreadyPending starts GitLab's refusal of a pending status over a pending one.
	gitlabAlreadyPending = "Cannot transition status via :enqueue from :pending"
)

// SetStatus sets the commit status st.Context on commit sha (40 or 64 hexadecimal digits,
// sent in lower case) of the repository, replacing the one of the same context:
//
//   - GitHub: POST /repos/{owner}/{repo}/statuses/{sha} with "state" (pending, success,
//     failure), "context", "description" and "target_url".
//   - Gitea: POST /api/v1/repos/{owner}/{repo}/statuses/{sha}, the same body.
//   - GitLab: POST /api/v4/projects/{path}/statuses/{sha} with "state" (pending, success,
//     failed), "name", "description" and "target_url". GitLab refuses a pending status
//     over a pending one of the same name (400, "Cannot transition status via :enqueue
//     from :pending"): SetStatus takes that answer as the status set.
//   - Bitbucket: POST /2.0/repositories/{workspace}/{repo}/commit/{sha}/statuses/build
//     with "state" (INPROGRESS, SUCCESSFUL, FAILED), "key", "name", "description" and
//     "url". Bitbucket requires a url: without a TargetURL, the repository's web page
//     https://bitbucket.org/{workspace}/{repo} is sent.
//
// An empty description or target URL is left out of the body (but Bitbucket's url).
//
// It needs a token. A malformed sha, an empty or over-long Context and an unknown State
// are refused before any request.
func (c *Client) SetStatus(ctx context.Context, sha string, st Status) error {
	return c.scrub(c.setStatus(ctx, sha, st))
}

func (c *Client) setStatus(ctx context.Context, sha string, st Status) error {
	state, err := c.checkStatus(sha, st)
	if err != nil {
		return err
	}
	path, body := c.statusRequest(strings.ToLower(sha), state, st)
	err = c.call(ctx, http.MethodPost, c.endpoint(path, nil), body, nil)
	if c.kind == GitLab && st.State == StatusPending && alreadyPending(err) {
		return nil
	}
	return err
}

// checkStatus refuses what cannot make one right status of commit sha, and returns the
// status's state in the forge's words.
func (c *Client) checkStatus(sha string, st Status) (string, error) {
	state, err := c.statusState(st.State)
	switch {
	case !isFullCommit(sha):
		return "", errors.New("a commit status is set on a commit's full hash: 40 or 64 hexadecimal digits")
	case st.Context == "":
		return "", errors.New("a commit status needs a context")
	case len(st.Context) > maxField:
		return "", fmt.Errorf("a commit status's context is longer than %d bytes", maxField)
	case err != nil:
		return "", err
	case c.cred == nil:
		return "", fmt.Errorf("%s: setting a commit status needs a token", c.kind)
	}
	return state, nil
}

// statusRequest is the escaped path and the JSON body setting st, whose state is state
// in the forge's words, on commit sha.
func (c *Client) statusRequest(sha, state string, st Status) (string, map[string]string) {
	body := map[string]string{"state": state}
	if desc := cutRunes(st.Description, maxDescription); desc != "" {
		body["description"] = desc
	}
	target := ""
	if st.TargetURL != "" && isWebURL(st.TargetURL) {
		target = st.TargetURL
	}
	switch c.kind {
	case Bitbucket:
		body["key"] = bitbucketKey(st.Context)
		body["name"] = st.Context
		if target == "" {
			target = "https://bitbucket.org/" + c.repo[0] + "/" + c.repo[1]
		}
		body["url"] = target
		return c.repoPath() + "/commit/" + sha + "/statuses/build", body
	case GitLab:
		body["name"] = st.Context
	default:
		body["context"] = st.Context
	}
	if target != "" {
		body["target_url"] = target
	}
	return c.repoPath() + "/statuses/" + sha, body
}

// statusState is state in the forge's words.
func (c *Client) statusState(state StatusState) (string, error) {
	var words map[StatusState]string
	switch c.kind {
	case GitLab:
		words = map[StatusState]string{StatusPending: "pending", StatusSuccess: "success", StatusFailure: "failed"}
	case Bitbucket:
		words = map[StatusState]string{StatusPending: "INPROGRESS", StatusSuccess: "SUCCESSFUL", StatusFailure: "FAILED"}
	default:
		words = map[StatusState]string{StatusPending: "pending", StatusSuccess: "success", StatusFailure: "failure"}
	}
	w, ok := words[state]
	if !ok {
		return "", fmt.Errorf("unknown commit status state %q: want pending, success or failure", cut(string(state), maxMessage))
	}
	return w, nil
}

// alreadyPending says whether err is GitLab's refusal of a pending status over a pending
// one.
func alreadyPending(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusBadRequest &&
		strings.HasPrefix(se.message, gitlabAlreadyPending)
}

// isFullCommit says whether s is a commit's full hash: 40 (SHA-1) or 64 (SHA-256)
// hexadecimal digits.
func isFullCommit(s string) bool {
	return (len(s) == 40 || len(s) == 64) && isCommit(s)
}

// cutRunes is s cut to at most n characters.
func cutRunes(s string, n int) string {
	i := 0
	for at := range s {
		if i == n {
			return s[:at]
		}
		i++
	}
	return s
}

// bitbucketKey is the key of a Bitbucket status of context name: name itself when it is
// at most 40 characters; else its first 27 characters, '-' and the first 12 hexadecimal
// digits of its SHA-256, 40 characters that differ for different names.
func bitbucketKey(name string) string {
	if utf8.RuneCountInString(name) <= maxBitbucketKey {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return cutRunes(name, maxBitbucketKey-keyHash-1) + "-" + hex.EncodeToString(sum[:])[:keyHash]
}
