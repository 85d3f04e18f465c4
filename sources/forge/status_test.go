package forge

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// statusPath is the path a commit status of commit is posted to on kind.
func statusPath(kind Kind, commit string) string {
	switch kind {
	case GitLab:
		return "/api/v4/projects/group%2Fsub%2Fshop/statuses/" + commit
	case Gitea:
		return "/api/v1/repos/octo/shop/statuses/" + commit
	case Bitbucket:
		return "/2.0/repositories/ws/shop/commit/" + commit + "/statuses/build"
	default:
		return "/repos/octo/shop/statuses/" + commit
	}
}

// statusAnswer is the forge's answer to a status set, as it writes it.
func statusAnswer(kind Kind, state, name string) string {
	switch kind {
	case GitLab:
		return mustJSON(map[string]any{"id": 93, "sha": sha(0xabc), "ref": "main", "status": state, "name": name,
			"target_url": nil, "description": nil, "created_at": "2024-05-01T10:00:00.000Z", "allow_failure": false})
	case Bitbucket:
		return mustJSON(map[string]any{"type": "build", "key": name, "state": state, "name": name,
			"url": "https://ci.example/1", "created_on": "2024-05-01T10:00:00+00:00"})
	default:
		return mustJSON(map[string]any{"id": 1, "state": state, "context": name, "description": "",
			"target_url": "", "created_at": "2024-05-01T10:00:00Z"})
	}
}

// SetStatus posts each forge its own endpoint and body.
func TestSetStatus(t *testing.T) {
	commit := sha(0xabc)
	const ctxName = "converge/previews"
	for _, fx := range fixtures {
		kind := fx.kind
		for _, tc := range []struct {
			name   string
			sha    string
			st     Status
			path   string
			body   map[Kind]string
			answer string
		}{{
			name: "success with a target URL",
			sha:  commit,
			st: Status{State: StatusSuccess, Context: ctxName, Description: "ready at pr-7.shop.example",
				TargetURL: "https://pr-7.shop.example/"},
			path: statusPath(kind, commit),
			body: map[Kind]string{
				GitHub:    `{"state":"success","context":"converge/previews","description":"ready at pr-7.shop.example","target_url":"https://pr-7.shop.example/"}`,
				Gitea:     `{"state":"success","context":"converge/previews","description":"ready at pr-7.shop.example","target_url":"https://pr-7.shop.example/"}`,
				GitLab:    `{"state":"success","name":"converge/previews","description":"ready at pr-7.shop.example","target_url":"https://pr-7.shop.example/"}`,
				Bitbucket: `{"state":"SUCCESSFUL","key":"converge/previews","name":"converge/previews","description":"ready at pr-7.shop.example","url":"https://pr-7.shop.example/"}`,
			},
		}, {
			name: "pending without a target URL",
			sha:  commit,
			st:   Status{State: StatusPending, Context: ctxName, Description: "deploying"},
			path: statusPath(kind, commit),
			body: map[Kind]string{
				GitHub:    `{"state":"pending","context":"converge/previews","description":"deploying"}`,
				Gitea:     `{"state":"pending","context":"converge/previews","description":"deploying"}`,
				GitLab:    `{"state":"pending","name":"converge/previews","description":"deploying"}`,
				Bitbucket: `{"state":"INPROGRESS","key":"converge/previews","name":"converge/previews","description":"deploying","url":"https://bitbucket.org/ws/shop"}`,
			},
		}, {
			name: "failure without a description, a target URL not http(s) dropped",
			sha:  commit,
			st:   Status{State: StatusFailure, Context: ctxName, TargetURL: "javascript:alert(1)"},
			path: statusPath(kind, commit),
			body: map[Kind]string{
				GitHub:    `{"state":"failure","context":"converge/previews"}`,
				Gitea:     `{"state":"failure","context":"converge/previews"}`,
				GitLab:    `{"state":"failed","name":"converge/previews"}`,
				Bitbucket: `{"state":"FAILED","key":"converge/previews","name":"converge/previews","url":"https://bitbucket.org/ws/shop"}`,
			},
		}, {
			name: "a SHA-256 commit in upper case, sent in lower case",
			sha:  strings.ToUpper(strings.Repeat("ab", 32)),
			st:   Status{State: StatusSuccess, Context: "c", TargetURL: "http://ci.example/1"},
			path: statusPath(kind, strings.Repeat("ab", 32)),
			body: map[Kind]string{
				GitHub:    `{"state":"success","context":"c","target_url":"http://ci.example/1"}`,
				Gitea:     `{"state":"success","context":"c","target_url":"http://ci.example/1"}`,
				GitLab:    `{"state":"success","name":"c","target_url":"http://ci.example/1"}`,
				Bitbucket: `{"state":"SUCCESSFUL","key":"c","name":"c","url":"http://ci.example/1"}`,
			},
		}} {
			t.Run(string(kind)+"/"+tc.name, func(t *testing.T) {
				f := newFake(t, kind, testToken, exchange{method: http.MethodPost, path: tc.path, body: tc.body[kind],
					status: http.StatusCreated, answer: statusAnswer(kind, "whatever", tc.st.Context)})
				if err := f.client(fx.repo).SetStatus(context.Background(), tc.sha, tc.st); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// GitLab refuses a pending status over a pending one: the status is as asked, not an
// error. Its other refusals, and that one for another state, stay errors.
func TestSetStatusGitLabAlreadyPending(t *testing.T) {
	commit := sha(0xabc)
	refusal := mustJSON(map[string]string{"message": `Cannot transition status via :enqueue from :pending (Reason(s): Status cannot transition via "enqueue")`})
	for _, tc := range []struct {
		name    string
		state   StatusState
		answer  string
		wantErr string
	}{
		{"pending over pending", StatusPending, refusal, ""},
		{"pending over running", StatusPending,
			mustJSON(map[string]string{"message": "Cannot transition status via :enqueue from :running"}), "400 Bad Request"},
		{"another refusal", StatusPending, mustJSON(map[string]string{"message": "404 References for commit Not Found"}), "400 Bad Request"},
		{"success refused", StatusSuccess, refusal, "400 Bad Request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := map[StatusState]string{StatusPending: "pending", StatusSuccess: "success"}[tc.state]
			f := newFake(t, GitLab, testToken, exchange{method: http.MethodPost, path: statusPath(GitLab, commit),
				body:   mustJSON(map[string]string{"state": state, "name": "converge"}),
				status: http.StatusBadRequest, answer: tc.answer})
			err := f.client("group/sub/shop").SetStatus(context.Background(), commit, Status{State: tc.state, Context: "converge"})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

// What cannot make one right status is refused before any request.
func TestSetStatusRefuses(t *testing.T) {
	good := Status{State: StatusSuccess, Context: "converge"}
	with := func(f func(*Status)) Status {
		st := good
		f(&st)
		return st
	}
	for _, tc := range []struct {
		name    string
		token   string
		sha     string
		st      Status
		wantErr string
	}{
		{"no sha", testToken, "", good, "full hash"},
		{"a short sha", testToken, "abc1234", good, "full hash"},
		{"41 digits", testToken, sha(1) + "0", good, "full hash"},
		{"63 digits", testToken, strings.Repeat("a", 63), good, "full hash"},
		{"not hexadecimal", testToken, strings.Repeat("g", 40), good, "full hash"},
		{"a path in the sha", testToken, "../../../" + sha(1)[9:], good, "full hash"},
		{"no context", testToken, sha(1), with(func(s *Status) { s.Context = "" }), "needs a context"},
		{"an over-long context", testToken, sha(1), with(func(s *Status) { s.Context = strings.Repeat("c", maxField+1) }), "longer than"},
		{"no state", testToken, sha(1), with(func(s *Status) { s.State = "" }), "unknown commit status state"},
		{"an unknown state", testToken, sha(1), with(func(s *Status) { s.State = "error" }), `unknown commit status state "error"`},
		{"a forge's own word", testToken, sha(1), with(func(s *Status) { s.State = "SUCCESSFUL" }), "unknown commit status state"},
		{"no token", "", sha(1), good, "setting a commit status needs a token"},
	} {
		for _, fx := range fixtures {
			t.Run(string(fx.kind)+"/"+tc.name, func(t *testing.T) {
				f := newFake(t, fx.kind, tc.token) // asked nothing
				err := f.client(fx.repo).SetStatus(context.Background(), tc.sha, tc.st)
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
			})
		}
	}
}

// A description is cut to 140 characters, never inside one.
func TestSetStatusDescriptionCap(t *testing.T) {
	for _, tc := range []struct{ name, desc, want string }{
		{"140 characters kept", strings.Repeat("é", 140), strings.Repeat("é", 140)},
		{"two-byte characters", strings.Repeat("é", 141), strings.Repeat("é", 140)},
		{"a four-byte character across the cap", strings.Repeat("a", 139) + "😀😀", strings.Repeat("a", 139) + "😀"},
		{"a mix", strings.Repeat("日本", 100), strings.Repeat("日本", 70)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			commit := sha(0xabc)
			f := newFake(t, GitHub, testToken, exchange{method: http.MethodPost, path: statusPath(GitHub, commit),
				body:   mustJSON(map[string]string{"state": "pending", "context": "converge", "description": tc.want}),
				status: http.StatusCreated, answer: statusAnswer(GitHub, "pending", "converge")})
			err := f.client("octo/shop").SetStatus(context.Background(), commit,
				Status{State: StatusPending, Context: "converge", Description: tc.desc})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Bitbucket key longer than 40 characters is shortened the same way every time, to 40
// characters, different for different contexts; the name stays whole.
func TestSetStatusBitbucketKey(t *testing.T) {
	long := "converge/previews/" + strings.Repeat("tenant-with-a-long-name/", 3)
	key := bitbucketKey(long)
	if key != bitbucketKey(long) {
		t.Fatal("the key differs from one call to the next")
	}
	if n := utf8.RuneCountInString(key); n != maxBitbucketKey || !strings.HasPrefix(key, long[:maxBitbucketKey-keyHash-1]+"-") {
		t.Errorf("key %q of %d characters", key, n)
	}
	for _, other := range []string{long + "x", long[:len(long)-1] + "X", long[:maxBitbucketKey+1]} {
		if bitbucketKey(other) == key {
			t.Errorf("%q and %q have the same key %q", long, other, key)
		}
	}
	exact := strings.Repeat("k", maxBitbucketKey)
	if bitbucketKey(exact) != exact {
		t.Errorf("a key of 40 characters was changed to %q", bitbucketKey(exact))
	}
	wide := strings.Repeat("é", maxBitbucketKey+1)
	if k := bitbucketKey(wide); !utf8.ValidString(k) || utf8.RuneCountInString(k) != maxBitbucketKey {
		t.Errorf("key %q of a context of two-byte characters", k)
	}

	commit := sha(0xabc)
	f := newFake(t, Bitbucket, testToken, exchange{method: http.MethodPost, path: statusPath(Bitbucket, commit),
		body:   mustJSON(map[string]string{"state": "SUCCESSFUL", "key": key, "name": long, "url": "https://bitbucket.org/ws/shop"}),
		status: http.StatusCreated, answer: statusAnswer(Bitbucket, "SUCCESSFUL", key)})
	if err := f.client("ws/shop").SetStatus(context.Background(), commit, Status{State: StatusSuccess, Context: long}); err != nil {
		t.Fatal(err)
	}
}

// A forge answering 500 with the request echoed gets an error naming the call, without
// the token.
func TestSetStatusTokenNeverInErrors(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(string(fx.kind), func(t *testing.T) {
			rec := newRecorder(t, func(r *http.Request) (int, string) {
				return http.StatusInternalServerError, mustJSON(map[string]string{"message": "failed: " + dumpHeaders(r)})
			})
			c, err := New(fx.kind, rec.srv.URL, fx.repo, testToken, rec.srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			err = c.SetStatus(context.Background(), sha(0xabc), Status{State: StatusPending, Context: "converge"})
			want := string(fx.kind) + ": POST " + statusPath(fx.kind, sha(0xabc)) + ": 500 Internal Server Error: failed:"
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("got %v, want %q…", err, want)
			}
			if strings.Contains(err.Error(), testToken[:6]) {
				t.Errorf("the token is in %q", err)
			}
			if n, creds := rec.seen(); n != 1 || len(creds) != 1 {
				t.Errorf("%d requests, credentials %q: the test proves nothing", n, creds)
			}
		})
	}
}
