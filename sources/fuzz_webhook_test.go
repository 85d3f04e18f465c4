package sources

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzWebhookHandler sends random bodies with random or valid signatures through the
// whole handler: it never panics, and it triggers a SyncTarget only for a body signed
// with that SyncTarget's secret and naming its repository.
func FuzzWebhookHandler(f *testing.F) {
	for _, seed := range []string{githubPush, gitlabPush, giteaPush, genericPush, `{"repository":null}`, `[]`, `{`} {
		f.Add([]byte(seed), "sha256=00", true, "X-Hub-Signature-256")
		f.Add([]byte(seed), "", false, "X-Gitlab-Token")
	}
	const secret = "fuzz-secret"
	targets := fakeTargets{"github.com/org/app": {{Key: "app", Secret: []byte(secret), Name: "ns/app"}}}
	f.Fuzz(func(t *testing.T, body []byte, sig string, sign bool, header string) {
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
		keys := trig.triggered()
		if len(keys) == 0 {
			if rec.Code == http.StatusAccepted {
				t.Fatalf("202 without a trigger for %q", body)
			}
			return
		}
		if !sign && (header != "X-Gitlab-Token" || sig != secret) {
			t.Fatalf("triggered %v by an unsigned body %q (%s: %q)", keys, body, header, sig)
		}
		repos, err := PayloadRepositories(body)
		if err != nil {
			t.Fatalf("triggered %v by a body that does not parse: %v", keys, err)
		}
		named := false
		for _, r := range repos {
			named = named || r == "github.com/org/app"
		}
		if !named {
			t.Fatalf("triggered %v by a body naming %v", keys, repos)
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
