package convert

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// previewServiceAccount is the service account a converted pullRequests generator runs
// its previews as: Argo CD has no such field, so the output names one to create.
const previewServiceAccount = "preview"

// argoForges are the forges of Argo CD's pullRequest generator converge lists.
var argoForges = map[string]convergev1.ForgeType{
	"github":    convergev1.GitHubForge,
	"gitlab":    convergev1.GitLabForge,
	"gitea":     convergev1.GiteaForge,
	"bitbucket": convergev1.BitbucketForge,
}

// literalBranch matches a targetBranchMatch regular expression that names one branch.
var literalBranch = regexp.MustCompile(`^\^?([A-Za-z0-9._/-]+)\$?$`)

// pullRequestGenerator maps Argo CD's pullRequest generator: one forge, its filters on
// the target branch and labels, and its requeue as the interval; the previews run as a
// service account the template names (previewServiceAccount).
func (c *conv) pullRequestGenerator(m map[string]any, t *setTarget) *convergev1.PullRequestsGenerator {
	pc := c.at("", c.in+"pullRequest.", c.out+"pullRequests.")
	g := &convergev1.PullRequestsGenerator{ServiceAccountName: previewServiceAccount}
	found := false
	for _, k := range sortedKeys(m) {
		switch k {
		case "github", "gitlab", "gitea", "bitbucket":
			if found {
				pc.lost(k, "", "converge lists one forge per generator: write a generator for each")
				continue
			}
			found = true
			g.Provider = argoForges[k]
			pc.forge(k, asMap(m[k]), g)
		case "filters":
			pc.pullRequestFilters(asSlice(m[k]), g)
		case "requeueAfterSeconds":
			if n, err := strconv.Atoi(asString(m[k])); err == nil && n > 0 {
				g.Interval = &metav1.Duration{Duration: time.Duration(max(n, 10)) * time.Second}
			}
		default:
			pc.lost(k, "", "no equivalent in converge's pullRequests generator")
		}
	}
	if !found {
		return nil
	}
	t.previews = true
	pc.note("serviceAccountName", "previews run as the service account %q (template.spec.serviceAccountName says the same): create it with the rights a pull request may have", previewServiceAccount)
	pc.note("", "a pull request from a fork, or by an author without write access, is deployed once a maintainer adds the label %q", "preview-approved")
	return g
}

// forge maps the fields of one forge of the generator.
func (c *conv) forge(kind string, m map[string]any, g *convergev1.PullRequestsGenerator) {
	fc := c.at("", c.in+kind+".", c.out)
	owner, repo := str(m, "owner"), str(m, "repo")
	if kind == "gitlab" {
		owner, repo = str(m, "project"), ""
		if _, err := strconv.Atoi(owner); err == nil {
			fc.lost("project", "repository", "converge names a GitLab project by its path (group/project), not its numeric id")
		}
	}
	g.Repository = strings.Trim(owner+"/"+repo, "/")
	if api := str(m, "api"); api != "" {
		g.Address = strings.TrimRight(api, "/")
		if kind == "gitea" || kind == "gitlab" {
			g.Address = strings.TrimSuffix(strings.TrimSuffix(g.Address, "/api/v1"), "/api/v4")
		}
	}
	for _, k := range sortedKeys(m) {
		switch k {
		case "owner", "repo", "project", "api":
		case "tokenRef":
			ref := asMap(m[k])
			g.TokenSecretRef = &convergev1.LocalObjectReference{Name: str(ref, "secretName")}
			if key := str(ref, "key"); key != "token" {
				fc.note("tokenSecretRef", "the token is read from the key \"token\" of the Secret, not %q: copy it there", key)
			}
		case "labels":
			g.Labels = strings1(m[k])
		case "bearerToken":
			if ref := asMap(get(asMap(m[k]), "tokenRef")); ref != nil {
				g.TokenSecretRef = &convergev1.LocalObjectReference{Name: str(ref, "secretName")}
				fc.note("tokenSecretRef", "the token is read from the key \"token\" of the Secret %q", str(ref, "secretName"))
			}
		case "pullRequestState":
			if s := str(m, k); s != "" && s != "opened" {
				fc.lost(k, "", "converge lists open merge requests only")
			}
		default:
			fc.lost(k, "", fmt.Sprintf("no equivalent in converge's %s listing (a token in tokenSecretRef, the forge's own CA)", kind))
		}
	}
}

// pullRequestFilters maps filters that name target branches; a filter on the head
// branch, or a pattern, has no equivalent.
func (c *conv) pullRequestFilters(filters []any, g *convergev1.PullRequestsGenerator) {
	for i, f := range filters {
		fm := asMap(f)
		at := "filters[" + strconv.Itoa(i) + "]"
		for _, k := range sortedKeys(fm) {
			switch k {
			case "targetBranchMatch":
				if m := literalBranch.FindStringSubmatch(str(fm, k)); m != nil {
					g.TargetBranches = append(g.TargetBranches, m[1])
					continue
				}
				c.lost(at+"."+k, "targetBranches", "converge filters target branches by name, not by pattern: list them")
			default:
				c.lost(at+"."+k, "", "no equivalent in converge's pullRequests generator: filter by labels")
			}
		}
	}
	sort.Strings(g.TargetBranches)
}
