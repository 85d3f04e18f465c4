package convert

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// lineBreaks are the characters a YAML parser may take for the end of a comment.
var lineBreaks = map[string]string{
	"LF": "\n", "CR": "\r", "CRLF": "\r\n", "NEL": "\u0085", "LS": "\u2028", "PS": "\u2029",
}

// smuggled is a ClusterRoleBinding document, its lines ended by br, between a line break
// and "---" and a "---" and "#" that start a new document with the rest of the line as a
// comment: written unescaped into a comment of the output, it is a document of its own.
func smuggled(br string) string {
	lines := []string{"", "---", "apiVersion: rbac.authorization.k8s.io/v1", "kind: ClusterRoleBinding",
		"metadata: {name: pwned}", "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}",
		"subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: 'system:authenticated'}]", "---", "#"}
	return strings.Join(lines, br)
}

// hostileInput is Flux and Argo CD objects whose names, field names and expressions carry
// a smuggled document. Converted are the Kustomization app (a SyncTarget), the Application
// guestbook (a SyncTarget) and the ApplicationSet addons (a SyncTargetSet); the objects
// named with the document are not.
func hostileInput(evil string) string {
	q := strconv.Quote // a YAML double-quoted string, every line break escaped
	return `
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: ` + q("repo"+evil) + `, namespace: team}
spec: {url: https://github.com/acme/app, ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: team}
spec:
  sourceRef: {kind: GitRepository, name: ` + q("repo"+evil) + `}
  path: ` + q("./deploy"+evil) + `
  ` + q("extra"+evil) + `: true
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: ` + q("team"+evil) + `}
spec: {sourceRef: {kind: GitRepository, name: repo}, path: ./deploy}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: guestbook, namespace: argocd}
spec:
  project: ` + q("team-a"+evil) + `
  source: {repoURL: https://github.com/acme/apps.git, targetRevision: ` + q("main"+evil) + `, path: ` + q("guestbook"+evil) + `}
  destination: {name: ` + q("prod"+evil) + `, namespace: guestbook}
  syncPolicy:
    automated: {prune: true, selfHeal: true}
    syncOptions: [` + q("Replace"+evil+"=true") + `]
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: ` + q("guestbook"+evil) + `, namespace: argocd}
spec:
  source: {repoURL: https://github.com/acme/apps.git, targetRevision: main, path: guestbook}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
  syncPolicy: {automated: {prune: true, selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: addons, namespace: argocd}
spec:
  generators:
    - git:
        repoURL: https://github.com/acme/addons.git
        revision: main
        directories: [{path: addons/*}]
  template:
    metadata:
      name: ` + q("{{path.basename"+evil+"}}") + `
      labels: {team: ` + q("{{ index .labels"+evil+" }}") + `}
    spec:
      source: {repoURL: https://github.com/acme/addons.git, targetRevision: main, path: ` + q("{{path"+evil+"}}") + `}
      destination: {server: https://kubernetes.default.svc, namespace: ` + q("{{path[1]"+evil+"}}") + `}
      syncPolicy: {automated: {prune: true, selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: ` + q("addons"+evil) + `, namespace: argocd}
spec:
  generators: [{list: {elements: [{name: a}]}}]
  template:
    metadata: {name: '{{name}}'}
    spec:
      source: {repoURL: https://github.com/acme/addons.git, targetRevision: main, path: x}
      destination: {server: https://kubernetes.default.svc, namespace: x}
      syncPolicy: {automated: {prune: true, selfHeal: true}}
`
}

// TestHostileNamesStayInComments: a name, field name or expression that the output writes
// into a comment cannot end the comment, whatever line break it carries: the output is the
// three converted objects and nothing else, and the objects whose names the API server
// would refuse are reported, not converted.
func TestHostileNamesStayInComments(t *testing.T) {
	for name, br := range lineBreaks {
		t.Run(name, func(t *testing.T) {
			res, out := convertString(t, hostileInput(smuggled(br)))
			kinds := outputKinds(t, out)
			want := []string{"SyncTarget/guestbook", "SyncTarget/app", "SyncTargetSet/addons"}
			if strings.Join(kinds, " ") != strings.Join(want, " ") {
				t.Errorf("documents: got %q, want %q\n%s", kinds, want, out)
			}
			invalid := 0
			for _, p := range res.Problems {
				if p.Field == "metadata.name" || p.Field == "metadata.namespace" {
					invalid++
				}
				if s := p.String(); strings.IndexFunc(s, notPrintable) >= 0 {
					t.Errorf("problem with an unescaped control character or line break: %q", s)
				}
			}
			if invalid != 4 {
				t.Errorf("want the GitRepository, the Kustomization, the Application and the ApplicationSet reported for their names, got %d:\n%s", invalid, problemList(res))
			}
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "#") && strings.IndexFunc(l, notPrintable) >= 0 {
					t.Errorf("comment with an unescaped control character or line break: %q", l)
				}
			}
		})
	}
}

// TestPrintEscapesComments: the names an Object comes from and the text of its notes are
// escaped in the comments Print writes, wherever the note goes.
func TestPrintEscapesComments(t *testing.T) {
	for name, br := range lineBreaks {
		t.Run(name, func(t *testing.T) {
			evil := smuggled(br)
			st := newSyncTarget(&unstructuredT{Object: map[string]any{"metadata": map[string]any{"name": "app", "namespace": "team"}}})
			st.Spec.Path = "deploy"
			o := Object{From: []string{"Kustomization team/app" + evil, "GitRepository team/repo" + evil}, Object: st,
				Notes: []Note{{Path: "spec.path", Text: "path" + evil}, {Path: "other", Text: "header" + evil}}}
			var buf bytes.Buffer
			if err := Print(&buf, Result{Objects: []Object{o}}); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			if kinds := outputKinds(t, out); len(kinds) != 1 || kinds[0] != "SyncTarget/app" {
				t.Errorf("documents: got %q, want the SyncTarget only\n%s", kinds, out)
			}
			if strings.IndexFunc(out, notPrintable) >= 0 {
				t.Errorf("unescaped control character or line break in the output:\n%q", out)
			}
			if !commentBefore(out, "path: deploy", "path\\") {
				t.Errorf("the note of spec.path is not above it, escaped:\n%s", out)
			}
		})
	}
}

// notPrintable is a rune that is neither printable nor the line feed that ends a line.
func notPrintable(r rune) bool {
	return r != '\n' && !unicode.IsPrint(r)
}

// outputKinds parses out as YAML, both as a YAML parser and as kubectl split it into
// documents, and returns kind/name of each document (the same both ways, or it fails).
func outputKinds(t *testing.T, out string) []string {
	t.Helper()
	var parsed []string
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the output is not valid YAML: %v\n%s", err, out)
		}
		if m != nil {
			parsed = append(parsed, kindName(m))
		}
	}
	var split []string
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := sigsyaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("a document of the output does not parse: %v\n%s", err, doc)
		}
		if m != nil {
			split = append(split, kindName(m))
		}
	}
	if strings.Join(parsed, " ") != strings.Join(split, " ") {
		t.Errorf("a YAML parser reads %q, kubectl's reader %q\n%s", parsed, split, out)
	}
	return parsed
}

func kindName(m map[string]any) string {
	meta, _ := m["metadata"].(map[string]any)
	return asString(m["kind"]) + "/" + asString(meta["name"])
}

// TestOCIURLsWithCredentialsOrAnotherSchemeAreRefused: an OCI URL holding credentials is
// refused, and neither the output nor a problem repeats them; one that is no oci:// URL is
// refused too. What reads it (a Kustomization, a HelmRelease, an Application) is not
// converted, and says why.
func TestOCIURLsWithCredentialsOrAnotherSchemeAreRefused(t *testing.T) {
	const secret = "s3cr3t-t0ken"
	tests := []struct {
		name, in, from, field, reason string
	}{
		{"OCIRepository with credentials", `
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: app, namespace: team}
spec: {url: "oci://robot:` + secret + `@ghcr.io/acme/manifests/app", ref: {tag: v1}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: team}
spec: {sourceRef: {kind: OCIRepository, name: app}, path: ./}
`, "OCIRepository team/app", "spec.url", "the URL holds credentials"},
		{"OCIRepository with a user only", `
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: app, namespace: team}
spec: {url: "oci://` + secret + `@ghcr.io/acme/manifests/app", ref: {tag: v1}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: team}
spec: {sourceRef: {kind: OCIRepository, name: app}, path: ./}
`, "OCIRepository team/app", "spec.url", "the URL holds credentials"},
		{"OCIRepository with a line break in its credentials", `
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: app, namespace: team}
spec: {url: ` + strconv.Quote("oci://robot:"+secret+smuggled("\n")+"@ghcr.io/acme/app") + `, ref: {tag: v1}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: team}
spec: {sourceRef: {kind: OCIRepository, name: app}, path: ./}
`, "OCIRepository team/app", "spec.url", "not a URL"},
		{"OCIRepository over https", `
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: app, namespace: team}
spec: {url: "https://ghcr.io/acme/manifests/app", ref: {tag: v1}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: team}
spec: {sourceRef: {kind: OCIRepository, name: app}, path: ./}
`, "OCIRepository team/app", "spec.url", "not an oci:// URL"},
		{"chartRef to an OCIRepository with credentials", `
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: podinfo, namespace: team}
spec: {url: "oci://robot:` + secret + `@ghcr.io/stefanprodan/charts/podinfo", ref: {semver: ">=6.0.0"}}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: podinfo, namespace: team}
spec: {chartRef: {kind: OCIRepository, name: podinfo}}
`, "OCIRepository team/podinfo", "spec.url", "the URL holds credentials"},
		{"Application of an artifact with credentials", `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: app, namespace: argocd}
spec:
  source: {repoURL: "oci://robot:` + secret + `@ghcr.io/acme/manifests/app", targetRevision: v1, path: .}
  destination: {name: in-cluster, namespace: app}
`, "Application argocd/app", "spec.source.repoURL", "the URL holds credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out := convertString(t, tt.in)
			if kinds := outputKinds(t, out); len(kinds) != 0 {
				t.Errorf("nothing is converted; got %q\n%s", kinds, out)
			}
			p := problem(t, res, tt.from, tt.field)
			if p.Warning || !strings.Contains(p.Reason, tt.reason) {
				t.Errorf("problem: %+v", p)
			}
			if !res.Failed() {
				t.Error("the result does not say it failed")
			}
			for _, p := range res.Problems {
				if strings.Contains(p.String(), secret) {
					t.Errorf("a problem repeats the credentials: %s", p)
				}
			}
			if strings.Contains(out, secret) {
				t.Errorf("the output holds the credentials:\n%s", out)
			}
		})
	}
}
