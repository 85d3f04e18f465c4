package sources

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// FuzzWebhookHandler sends random bodies with random or valid signatures through the
// whole handler: it never panics, it triggers a SyncTarget only for a body signed with that
// SyncTarget's secret and naming its repository, it looks a source key up (reading
// credentials) only for such a body, and every refusal of a signature reads the same.
func FuzzWebhookHandler(f *testing.F) {
	const unknown = `{"repository":{"url":"https://github.com/org/unknown"}}`
	const both = `{"repository":{"url":"https://github.com/org/app"},"project":{"web_url":"https://github.com/org/crowd"}}`
	for _, seed := range []string{githubPush, gitlabPush, giteaPush, genericPush, unknown, both,
		`{"repository":{"url":"https://github.com/org/crowd"}}`, `{"repository":null}`, `[]`, `{`} {
		f.Add([]byte(seed), "sha256=00", true, "X-Hub-Signature-256")
		f.Add([]byte(seed), "", false, "X-Gitlab-Token")
		f.Add([]byte(seed), "fuzz-secret", false, "X-Gitlab-Token")
		f.Add([]byte(seed), "sha256="+hmacHex("fuzz-secret", seed)+", sha256=00", false, "X-Signature")
		f.Add([]byte(seed), strings.Repeat("0", 64), false, "X-Gitea-Signature")
	}
	const secret = "fuzz-secret"
	f.Fuzz(func(t *testing.T, body []byte, sig string, sign bool, header string) {
		var lookups atomic.Int64
		crowd := make([]WebhookTarget, 5)
		for i := range crowd {
			crowd[i] = WebhookTarget{Secret: []byte(secret), Name: fmt.Sprintf("ns/crowd-%d", i),
				SourceKey: func(context.Context) (Key, error) { lookups.Add(1); return "crowd", nil }}
		}
		targets := fakeTargets{
			"github.com/org/app":   {{Key: "app", Secret: []byte(secret), Name: "ns/app"}},
			"github.com/org/crowd": crowd,
		}
		trig := &fakeTrigger{}
		h := NewWebhookHandler(targets, trig, WebhookOptions{})
		req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(string(body)))
		if sign {
			sig = "sha256=" + hmacHex(secret, string(body))
			header = "X-Signature"
		}
		if header != "" && !strings.ContainsAny(header, "\r\n:\x00 ") {
			req.Header.Set(header, sig)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusUnauthorized {
			if got := rec.Body.String(); got != "missing signature\n" && got != "signature does not match any target of this repository\n" {
				t.Fatalf("a refusal that reads differently: %q", got)
			}
		}
		keys := trig.triggered()
		if len(keys) == 0 && lookups.Load() == 0 {
			if rec.Code == http.StatusAccepted {
				t.Fatalf("202 without a trigger for %q", body)
			}
			return
		}
		if !sign && (http.CanonicalHeaderKey(header) != "X-Gitlab-Token" || sig != secret) {
			t.Fatalf("triggered %v, %d lookups, by an unsigned body %q (%s: %q)", keys, lookups.Load(), body, header, sig)
		}
		repos, err := PayloadRepositories(body)
		if err != nil {
			t.Fatalf("triggered %v by a body that does not parse: %v", keys, err)
		}
		named := map[string]bool{}
		for _, r := range repos {
			named[r] = true
		}
		for _, k := range keys {
			if (k == "app" && !named["github.com/org/app"]) || (k == "crowd" && !named["github.com/org/crowd"]) {
				t.Fatalf("triggered %v by a body naming %v", keys, repos)
			}
		}
		if lookups.Load() > 0 && !named["github.com/org/crowd"] {
			t.Fatalf("%d lookups for a body naming %v", lookups.Load(), repos)
		}
	})
}

// FuzzRefValidate: whatever a SyncTarget's ref holds, Validate and String never panic,
// and what Validate accepts is one kind of ref with a well-formed commit or ref name.
func FuzzRefValidate(f *testing.F) {
	f.Add("main", "", "", "", "")
	f.Add("", "v1.2.3", "", "", "")
	f.Add("", "", ">=1.0.0 <2.0.0", "", "")
	f.Add("", "", "", "0123456789abcdef0123456789abcdef01234567", "")
	f.Add("", "", "", "", "refs/pull/7/head")
	f.Add("main", "v1", "", "", "")
	f.Fuzz(func(t *testing.T, branch, tag, semver, commit, name string) {
		r := Ref{Branch: branch, Tag: tag, SemVer: semver, Commit: commit, Name: name}
		_ = r.String()
		if err := r.Validate(); err != nil {
			return
		}
		set := 0
		for _, v := range []string{branch, tag, semver, commit, name} {
			if v != "" {
				set++
			}
		}
		if set > 1 {
			t.Fatalf("Validate accepted %d kinds of ref: %+v", set, r)
		}
		if commit != "" && !isHex(commit, 40) && !isHex(commit, 64) {
			t.Fatalf("Validate accepted commit %q", commit)
		}
		if name != "" && name != "HEAD" && !strings.HasPrefix(name, "refs/") {
			t.Fatalf("Validate accepted ref name %q", name)
		}
	})
}
