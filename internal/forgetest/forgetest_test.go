package forgetest_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/converge-gitops/converge/internal/forgetest"
	"github.com/converge-gitops/converge/sources/forge"
)

// fake is what the three fakes have in common.
type fake interface {
	Writer(user string)
	Open(n int, branch, sha, author string, fork bool, labels ...string)
	Comments(n int) []forgetest.Comment
	Statuses(sha string) []forgetest.Status
	Requests() []string
	Lists() int
}

var (
	sha1 = strings.Repeat("1", 40)
	sha2 = strings.Repeat("2", 40)
)

// The client of sources/forge lists the pull requests of each fake, asks the authors'
// permission and writes its comment, then edits it in place, in that forge's words.
func TestTheClientSpeaksToTheFakes(t *testing.T) {
	for _, tc := range []struct {
		kind    forge.Kind
		repo    string
		start   func(t *testing.T, repo string) (string, fake)
		headRef string
		want    []string
	}{{
		kind: forge.GitLab, repo: "group/sub/app",
		start: func(t *testing.T, repo string) (string, fake) {
			f := forgetest.NewGitLab(t, repo, "s3cret")
			return f.URL, f
		},
		headRef: "refs/merge-requests/1/head",
		want: []string{
			"GET /api/v4/projects/group%2Fsub%2Fapp/merge_requests",
			"GET /api/v4/projects/group%2Fsub%2Fapp/members/all/101",
			"GET /api/v4/projects/group%2Fsub%2Fapp/members/all/102",
			"GET /api/v4/user",
			"GET /api/v4/projects/group%2Fsub%2Fapp/merge_requests/1/notes",
			"POST /api/v4/projects/group%2Fsub%2Fapp/merge_requests/1/notes",
			"GET /api/v4/projects/group%2Fsub%2Fapp/merge_requests/1/notes",
			"PUT /api/v4/projects/group%2Fsub%2Fapp/merge_requests/1/notes/1",
		},
	}, {
		kind: forge.Gitea, repo: "o/app",
		start: func(t *testing.T, repo string) (string, fake) {
			f := forgetest.NewGitea(t, repo, "s3cret")
			return f.URL, f
		},
		headRef: "refs/pull/1/head",
		want: []string{
			"GET /api/v1/repos/o/app/pulls",
			"GET /api/v1/repos/o/app/collaborators/maintainer/permission",
			"GET /api/v1/repos/o/app/collaborators/visitor/permission",
			"GET /api/v1/user",
			"GET /api/v1/repos/o/app/issues/1/comments",
			"POST /api/v1/repos/o/app/issues/1/comments",
			"GET /api/v1/repos/o/app/issues/1/comments",
			"PATCH /api/v1/repos/o/app/issues/comments/1",
		},
	}, {
		kind: forge.GitHub, repo: "o/app",
		start: func(t *testing.T, repo string) (string, fake) {
			f := forgetest.NewGitHub(t, repo, "s3cret")
			return f.URL, f
		},
		headRef: "refs/pull/1/head",
		want: []string{
			"GET /repos/o/app/pulls",
			"GET /repos/o/app/collaborators/maintainer/permission",
			"GET /repos/o/app/collaborators/visitor/permission",
			"GET /user",
			"GET /repos/o/app/issues/1/comments",
			"POST /repos/o/app/issues/1/comments",
			"GET /repos/o/app/issues/1/comments",
			"PATCH /repos/o/app/issues/comments/1",
		},
	}} {
		t.Run(string(tc.kind), func(t *testing.T) {
			url, f := tc.start(t, tc.repo)
			f.Writer("maintainer")
			f.Open(1, "feature/login", sha1, "maintainer", false, "preview")
			f.Open(2, "typo", sha2, "visitor", true)
			c, err := forge.New(tc.kind, url, tc.repo, "s3cret", http.DefaultClient)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()

			prs, truncated, err := c.OpenPullRequests(ctx)
			if err != nil || truncated || len(prs) != 2 {
				t.Fatalf("OpenPullRequests: %+v, %v, %v", prs, truncated, err)
			}
			one, two := prs[0], prs[1]
			if one.Number != 1 || one.HeadRef != tc.headRef || one.Fork || one.Author != "maintainer" ||
				one.HeadBranch != "feature/login" || one.HeadSHA != sha1 || one.BaseBranch != "main" ||
				!slices.Equal(one.Labels, []string{"preview"}) || one.URL == "" || one.Draft || one.UpdatedAt.IsZero() {
				t.Errorf("pull request 1: %+v", one)
			}
			if two.Number != 2 || !two.Fork || two.Author != "visitor" || two.HeadSHA != sha2 || len(two.Labels) != 0 {
				t.Errorf("pull request 2: %+v", two)
			}
			for _, pr := range prs {
				user := pr.Author
				if tc.kind == forge.GitLab {
					user = pr.AuthorID
				}
				can, err := c.CanWrite(ctx, user)
				if err != nil || can != (pr.Author == "maintainer") {
					t.Errorf("CanWrite(%q) of %s: %v, %v", user, pr.Author, can, err)
				}
			}

			marker := "<!-- converge-preview shop/previews -->"
			first, err := c.UpsertComment(ctx, 1, marker, marker+"\nDeploying")
			if err != nil {
				t.Fatal(err)
			}
			second, err := c.UpsertComment(ctx, 1, marker, marker+"\nReady")
			if err != nil || second != first {
				t.Fatalf("the second UpsertComment: %q, %v; want %q", second, err, first)
			}
			want := []forgetest.Comment{{ID: 1, User: forgetest.BotLogin, Body: marker + "\nReady"}}
			if got := f.Comments(1); !slices.Equal(got, want) {
				t.Errorf("comments: %+v, want %+v", got, want)
			}
			if got := f.Requests(); !slices.Equal(got, tc.want) {
				t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if f.Lists() != 1 {
				t.Errorf("Lists() = %d, want 1", f.Lists())
			}
		})
	}
}

// Each fake records the commit statuses posted in its words, newest last.
func TestTheFakesRecordCommitStatuses(t *testing.T) {
	gh := forgetest.NewGitHub(t, "o/app", "s3cret")
	gl := forgetest.NewGitLab(t, "group/app", "s3cret")
	gt := forgetest.NewGitea(t, "o/app", "s3cret")
	for _, tc := range []struct {
		name          string
		f             fake
		url           string
		header, value string
		first, second string
	}{
		{"github", gh, gh.URL + "/repos/o/app/statuses/" + sha1, "Authorization", "Bearer s3cret",
			`{"state":"pending","context":"converge/shop","description":"deploying","target_url":"https://ui.example/x"}`,
			`{"state":"success","context":"converge/shop","description":"deployed"}`},
		{"gitlab", gl, gl.URL + "/api/v4/projects/group%2Fapp/statuses/" + sha1, "PRIVATE-TOKEN", "s3cret",
			`{"state":"running","name":"converge/shop","description":"deploying","target_url":"https://ui.example/x"}`,
			`{"state":"success","name":"converge/shop","description":"deployed"}`},
		{"gitea", gt, gt.URL + "/api/v1/repos/o/app/statuses/" + sha1, "Authorization", "token s3cret",
			`{"state":"pending","context":"converge/shop","description":"deploying","target_url":"https://ui.example/x"}`,
			`{"state":"success","context":"converge/shop","description":"deployed"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, body := range []string{tc.first, tc.second} {
				if code := post(t, tc.url, tc.header, tc.value, body); code != http.StatusCreated {
					t.Errorf("POST %s: %d", body, code)
				}
			}
			got := tc.f.Statuses(sha1)
			if len(got) != 2 || got[1].State != "success" || got[1].Context != "converge/shop" || got[1].Description != "deployed" ||
				got[0].TargetURL != "https://ui.example/x" || got[0].State == "success" {
				t.Errorf("statuses: %+v", got)
			}
			if other := tc.f.Statuses(sha2); len(other) != 0 {
				t.Errorf("statuses of another commit: %+v", other)
			}
		})
	}
}

// GitLab refuses a pending status over a pending one of the same name, as GitLab does.
func TestGitLabRefusesAPendingStatusOverAPendingOne(t *testing.T) {
	gl := forgetest.NewGitLab(t, "group/app", "s3cret")
	url := gl.URL + "/api/v4/projects/group%2Fapp/statuses/" + sha1
	for _, step := range []struct {
		state, name string
		want        int
	}{
		{"pending", "converge/shop", http.StatusCreated},
		{"pending", "converge/shop", http.StatusBadRequest},
		{"pending", "converge/other", http.StatusCreated},
		{"success", "converge/shop", http.StatusCreated},
		{"pending", "converge/shop", http.StatusCreated},
	} {
		body := `{"state":"` + step.state + `","name":"` + step.name + `"}`
		if code := post(t, url, "PRIVATE-TOKEN", "s3cret", body); code != step.want {
			t.Errorf("POST %s: %d, want %d", body, code, step.want)
		}
	}
	if got := gl.Statuses(sha1); len(got) != 4 || got[3].State != "pending" || got[3].Context != "converge/shop" {
		t.Errorf("statuses: %+v", got)
	}
}

// post sends body to url with the token in header, and returns the answer's code.
func post(t *testing.T, url, header, value, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(header, value)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
