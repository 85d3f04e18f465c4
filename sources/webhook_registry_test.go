package sources

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
)

// Notifications as the registries document them (fields the parser does not read are
// kept, shortened, so that they are there to be ignored).
const (
	// Distribution's envelope: a layer pushed, then its manifest, and a pull.
	distributionPush = `{"events": [
	  {"id": "320678d8-ca14-430f-8bb6-4ca139cd83f7", "timestamp": "2016-03-09T14:44:26.402973972-08:00",
	   "action": "push",
	   "target": {"mediaType": "application/octet-stream", "size": 2710, "digest": "sha256:0a33f1ae6b1a9e0cc93a0de58f3f39e3b5b0d1e4f0b9e8d9b0c2a2fcd3c1cf00",
	     "length": 2710, "repository": "team/app-config",
	     "url": "https://registry.example.com:5000/v2/team/app-config/blobs/sha256:0a33f1ae6b1a9e0cc93a0de58f3f39e3b5b0d1e4f0b9e8d9b0c2a2fcd3c1cf00"},
	   "request": {"id": "6df24a34-0959-4923-81ca-14f09767db19", "addr": "192.168.64.11:42961", "host": "registry.example.com:5000",
	     "method": "PUT", "useragent": "converge"},
	   "actor": {"name": "ci"}, "source": {"addr": "xtal.local:5000", "instanceID": "a53db899-3b4b-4a62-a067-8dd013beaca4"}},
	  {"id": "6df24a34-0959-4923-81ca-14f09767db20", "timestamp": "2016-03-09T14:44:26.403145732-08:00",
	   "action": "push",
	   "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 708, "digest": "sha256:fea8895f450959fa676bcc1df0611ea93823a735a01205fd8622846041d0c7cf",
	     "length": 708, "repository": "team/app-config", "tag": "latest",
	     "url": "https://registry.example.com:5000/v2/team/app-config/manifests/sha256:fea8895f450959fa676bcc1df0611ea93823a735a01205fd8622846041d0c7cf"},
	   "request": {"id": "6df24a34-0959-4923-81ca-14f09767db21", "addr": "192.168.64.11:42961", "host": "registry.example.com:5000",
	     "method": "PUT", "useragent": "converge"},
	   "actor": {"name": "ci"}, "source": {"addr": "xtal.local:5000", "instanceID": "a53db899-3b4b-4a62-a067-8dd013beaca4"}},
	  {"id": "a1b2", "timestamp": "2016-03-09T14:44:27Z", "action": "pull",
	   "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "repository": "team/other", "tag": "latest"},
	   "request": {"host": "registry.example.com:5000", "method": "GET"}}
	]}`
	// Distribution's envelope of pulls only: what converge's own polls cause.
	distributionPulls = `{"events": [{"id": "x", "action": "pull",
	   "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "repository": "team/app-config", "tag": "latest",
	     "url": "https://registry.example.com:5000/v2/team/app-config/manifests/latest"},
	   "request": {"host": "registry.example.com:5000", "method": "HEAD"}}]}`
	// Azure Container Registry: one event, no envelope.
	acrPush = `{"id": "cb8c3971-9adc-488b-xxxx-43cbb4974ff5", "timestamp": "2017-11-17T16:52:01.343145347Z", "action": "push",
	  "target": {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "size": 524,
	    "digest": "sha256:80f0d5c8786bb9e621a45ece0db56d11cdc624ad20da9fe62e9d25490f331d7d", "length": 524,
	    "repository": "hello-world", "tag": "v1"},
	  "request": {"id": "3cbb6949-7549-4fa1-xxxx-a6d5451dffc7", "host": "myregistry.azurecr.io", "method": "PUT",
	    "useragent": "docker/17.09.0-ce go/go1.8.3 git-commit/afdb6d4 kernel/4.10.0-27-generic os/linux arch/amd64 UpstreamClient(Docker-Client/17.09.0-ce \\(linux\\))"}}`
	// Harbor, default format.
	harborPush = `{"type": "PUSH_ARTIFACT", "occur_at": 1680501893, "operator": "harbor-ci",
	  "event_data": {
	    "resources": [{"digest": "sha256:954b378c375d852eb3c63ab88978f640b4348b01c1b3456a024a81536dafbbf4", "tag": "v1.2.0",
	      "resource_url": "harbor.example.com/library/shop-config:v1.2.0"}],
	    "repository": {"date_created": 1680501893, "name": "shop-config", "namespace": "library",
	      "repo_full_name": "library/shop-config", "repo_type": "private"}}}`
	// Harbor, CloudEvents format.
	harborCloudEvent = `{"specversion": "1.0", "requestid": "2eedfab8-61d3-4f3c-8ec3-8f82d1ec4c84",
	  "id": "4b2f89a6-548d-4c12-9993-a1f5790b97d2", "source": "/projects/2/webhook/policies/3",
	  "type": "harbor.artifact.pushed", "datacontenttype": "application/json", "time": "2023-03-06T06:08:43Z",
	  "data": {"resources": [{"digest": "sha256:954b378c375d852eb3c63ab88978f640b4348b01c1b3456a024a81536dafbbf4",
	      "tag": "latest", "resource_url": "harbor.example.com:8443/platform/shop-config@sha256:954b378c375d852eb3c63ab88978f640b4348b01c1b3456a024a81536dafbbf4"}],
	    "repository": {"date_created": 1678082303, "name": "shop-config", "namespace": "platform",
	      "repo_full_name": "platform/shop-config", "repo_type": "public"}},
	  "operator": "robot$platform+ci"}`
	harborPull = `{"type": "PULL_ARTIFACT", "occur_at": 1680501893, "operator": "admin",
	  "event_data": {"resources": [{"digest": "sha256:954b", "tag": "latest", "resource_url": "harbor.example.com/library/shop-config:latest"}],
	    "repository": {"name": "shop-config", "namespace": "library", "repo_full_name": "library/shop-config", "repo_type": "private"}}}`
	// GitHub's package event for a container of ghcr.io.
	githubPackage = `{"action": "published",
	  "package": {"id": 4106212, "name": "shop-config", "namespace": "Octo-Org", "description": "",
	    "ecosystem": "CONTAINER", "package_type": "CONTAINER",
	    "html_url": "https://github.com/orgs/Octo-Org/packages/container/package/shop-config",
	    "created_at": "2026-11-28T09:12:31Z", "updated_at": "2026-11-28T09:12:31Z",
	    "owner": {"login": "Octo-Org", "id": 6811672, "type": "Organization"},
	    "package_version": {"id": 32131711, "version": "sha256:1e8a53cc43bb0d1b9c0e4c0a2e6ad5a4ad1c29f4dd7b7d8c1b4b4ad1a0e2b2f1",
	      "name": "sha256:1e8a53cc43bb0d1b9c0e4c0a2e6ad5a4ad1c29f4dd7b7d8c1b4b4ad1a0e2b2f1", "description": "", "summary": "",
	      "html_url": "https://github.com/orgs/Octo-Org/packages/container/shop-config/32131711",
	      "metadata": [], "container_metadata": {"tag": {"name": "v3", "digest": "sha256:1e8a53cc43bb0d1b9c0e4c0a2e6ad5a4ad1c29f4dd7b7d8c1b4b4ad1a0e2b2f1"},
	        "labels": {"description": "", "source": "https://github.com/Octo-Org/shop", "revision": "0b1c4a9"},
	        "manifest": {"digest": "sha256:1e8a53cc43bb0d1b9c0e4c0a2e6ad5a4ad1c29f4dd7b7d8c1b4b4ad1a0e2b2f1", "media_type": "application/vnd.oci.image.manifest.v1+json"}},
	      "package_files": [], "installation_command": "docker pull ghcr.io/octo-org/shop-config:v3",
	      "package_url": "ghcr.io/octo-org/shop-config:v3"},
	    "registry": {"about_url": "https://docs.github.com/packages/learn-github-packages/introduction-to-github-packages",
	      "name": "GitHub CR", "type": "docker", "url": "https://ghcr.io/octo-org", "vendor": "GitHub Inc"}},
	  "repository": {"id": 17273051, "full_name": "Octo-Org/shop", "clone_url": "https://github.com/Octo-Org/shop.git"},
	  "sender": {"login": "octocat", "id": 583231}}`
	// GitHub's older registry_package event, untagged (package_url ends with ":").
	githubRegistryPackage = `{"action": "published",
	  "registry_package": {"id": 4106212, "name": "shop-config", "namespace": "octo-org", "ecosystem": "CONTAINER",
	    "package_type": "CONTAINER", "html_url": "https://github.com/orgs/octo-org/packages/container/package/shop-config",
	    "package_version": {"id": 32131712, "version": "sha256:2f9b", "package_url": "ghcr.io/octo-org/shop-config:"},
	    "registry": {"name": "GitHub CR", "type": "docker", "url": "https://ghcr.io/octo-org", "vendor": "GitHub Inc"}},
	  "repository": {"full_name": "octo-org/shop"}, "sender": {"login": "octocat"}}`
	githubNpmPackage = `{"action": "published",
	  "package": {"name": "shop-config", "namespace": "octo-org", "ecosystem": "npm", "package_type": "npm",
	    "package_version": {"version": "1.0.0", "package_url": "npm.pkg.github.com/@octo-org/shop-config@1.0.0"},
	    "registry": {"url": "https://npm.pkg.github.com/octo-org", "type": "npm"}}}`
	// Docker Hub: a repository of a user, and an official image.
	dockerHubPush = `{"callback_url": "https://registry.hub.docker.com/u/svendowideit/testhook/hook/2141b5bi5i5b02bec211i4eeih0242eg11000a/",
	  "push_data": {"pushed_at": 1417566161, "pusher": "trustedbuilder", "tag": "latest"},
	  "repository": {"comment_count": 0, "date_created": 1417494799, "description": "", "dockerfile": "FROM\u0009\u0009ubuntu",
	    "full_description": "Docker Hub based automated build from a GitHub repo", "is_official": false, "is_private": true,
	    "is_trusted": true, "name": "testhook", "namespace": "svendowideit", "owner": "svendowideit",
	    "repo_name": "svendowideit/testhook", "repo_url": "https://registry.hub.docker.com/u/svendowideit/testhook/",
	    "star_count": 0, "status": "Active"}}`
	dockerHubOfficial = `{"push_data": {"pushed_at": 1417566161, "pusher": "library", "tag": "1.27"},
	  "repository": {"name": "nginx", "namespace": "library", "repo_name": "nginx", "is_official": true}}`
	// Quay: a repository push, and a build queued (no push yet).
	quayPush = `{"name": "repository", "repository": "dgangaia/test", "namespace": "dgangaia",
	  "docker_url": "quay.io/dgangaia/test", "homepage": "https://quay.io/repository/dgangaia/repository",
	  "updated_tags": ["latest"]}`
	quayBuildQueued = `{"build_id": "296ec063-5f86-4706-a469-f0a400bf9df2", "trigger_kind": "github", "name": "test",
	  "repository": "dgangaia/test", "namespace": "dgangaia", "docker_url": "quay.io/dgangaia/test",
	  "trigger_id": "38b6e180-9521-4ff7-9844-acf371340b9e", "docker_tags": ["master", "latest"], "repo": "test"}`
)

// pubSubPush wraps an Artifact Registry message as a Pub/Sub push subscription posts it.
func pubSubPush(msg string) string {
	return `{"message": {"attributes": {}, "data": "` + base64.StdEncoding.EncodeToString([]byte(msg)) + `",
	  "messageId": "2070443601311540", "message_id": "2070443601311540", "publishTime": "2026-11-28T09:12:31.000Z",
	  "publish_time": "2026-11-28T09:12:31.000Z"}, "subscription": "projects/shop/subscriptions/converge"}`
}

var (
	garInsert = pubSubPush(`{"action": "INSERT",
	  "digest": "us-east1-docker.pkg.dev/shop-prod/config/shop-config@sha256:6ec128e26cd5aa3f0c6e1d8e7a4f0f8a1b8e0a2b0c4c1a9b8d7e6f5a4b3c2d1e",
	  "tag": "us-east1-docker.pkg.dev/shop-prod/config/shop-config:v7"}`)
	garDelete = pubSubPush(`{"action": "DELETE", "tag": "us-east1-docker.pkg.dev/shop-prod/config/shop-config:v6"}`)
)

func TestRegistryPayloadRepositories(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		want       []string
		err        string
	}{
		{name: "distribution: the manifest pushed, not the layer nor the pull", body: distributionPush,
			want: []string{"registry.example.com:5000/team/app-config"}},
		{name: "distribution: pulls only", body: distributionPulls, err: errNoPush.Error()},
		{name: "distribution: the host of target.url without request.host",
			body: `{"events":[{"action":"push","target":{"repository":"a/b","url":"http://reg.local:5000/v2/a/b/manifests/latest"}}]}`,
			want: []string{"reg.local:5000/a/b"}},
		{name: "azure container registry", body: acrPush, want: []string{"myregistry.azurecr.io/hello-world"}},
		{name: "harbor", body: harborPush, want: []string{"harbor.example.com/library/shop-config"}},
		{name: "harbor cloudevents", body: harborCloudEvent, want: []string{"harbor.example.com:8443/platform/shop-config"}},
		{name: "harbor pull", body: harborPull, err: errNoPush.Error()},
		{name: "github package", body: githubPackage, want: []string{"ghcr.io/octo-org/shop-config"}},
		{name: "github registry_package, untagged", body: githubRegistryPackage, want: []string{"ghcr.io/octo-org/shop-config"}},
		{name: "github npm package", body: githubNpmPackage, err: errNoPush.Error()},
		{name: "github package deleted", body: strings.Replace(githubPackage, `"published"`, `"deleted"`, 1), err: errNoPush.Error()},
		{name: "docker hub", body: dockerHubPush, want: []string{"docker.io/svendowideit/testhook"}},
		{name: "docker hub official image", body: dockerHubOfficial, want: []string{"docker.io/library/nginx"}},
		{name: "quay push", body: quayPush, want: []string{"quay.io/dgangaia/test"}},
		{name: "quay build queued", body: quayBuildQueued, err: errNoPush.Error()},
		{name: "artifact registry insert", body: garInsert, want: []string{"us-east1-docker.pkg.dev/shop-prod/config/shop-config"}},
		{name: "artifact registry delete", body: garDelete, err: errNoPush.Error()},
		{name: "a git push", body: githubPush, err: "not a registry notification"},
		{name: "malformed", body: `{"events": [`, err: "not json"},
		{name: "not an object", body: `[]`, err: "not a json object"},
		{name: "wrong types", body: `{"events": [1, null, {"action": 2, "target": []}], "event_data": {"resources": [7, {"resource_url": 3}]}, "type": "PUSH_ARTIFACT"}`,
			err: errNoPush.Error()},
		{name: "hostile repository", body: `{"events":[{"action":"push","target":{"repository":"../../x y"},"request":{"host":"reg.local"}}]}`,
			err: "no repository in the notification"},
		{name: "hostile host", body: `{"events":[{"action":"push","target":{"repository":"a/b"},"request":{"host":"user:pw@reg.local"}}]}`,
			err: "no repository in the notification"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := RegistryPayloadRepositories([]byte(tc.body))
			if tc.err != "" {
				g.Expect(err).To(MatchError(tc.err))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

// TestRegistryPayloadRepositoriesAreBounded: a notification naming many repositories is
// looked up for at most maxPayloadURLs of them.
func TestRegistryPayloadRepositoriesAreBounded(t *testing.T) {
	t.Parallel()
	var events []string
	for i := range 100 {
		events = append(events, fmt.Sprintf(`{"action":"push","target":{"repository":"r%d"},"request":{"host":"reg.local"}}`, i))
	}
	got, err := RegistryPayloadRepositories([]byte(`{"events":[` + strings.Join(events, ",") + `]}`))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(got).To(HaveLen(maxPayloadURLs))
}

func TestNormalizeOCIRepository(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"oci://ghcr.io/org/app":                          "ghcr.io/org/app",
		"oci://GHCR.io/Org/App":                          "ghcr.io/org/app",
		"ghcr.io/org/app:v1":                             "ghcr.io/org/app",
		"ghcr.io/org/app@sha256:0123":                    "ghcr.io/org/app",
		"ghcr.io/org/app:v1@sha256:0123":                 "ghcr.io/org/app",
		"https://ghcr.io/org/app/":                       "ghcr.io/org/app",
		"oci://registry.example.com:443/a/b":             "registry.example.com/a/b",
		"http://registry.example.com:80/a/b":             "registry.example.com/a/b",
		"oci://registry.example.com:5000/a/b":            "registry.example.com:5000/a/b",
		"registry.example.com:5000/a/b:latest":           "registry.example.com:5000/a/b",
		"localhost/app":                                  "localhost/app",
		"oci://127.0.0.1:5000/charts/app":                "127.0.0.1:5000/charts/app",
		"oci://[::1]:5000/app":                           "[::1]:5000/app",
		"oci://[0:0::1]/app":                             "[::1]/app",
		"oci://docker.io/org/app":                        "docker.io/org/app",
		"oci://registry-1.docker.io/org/app":             "docker.io/org/app",
		"oci://index.docker.io/library/nginx":            "docker.io/library/nginx",
		"registry.hub.docker.com/org/app":                "docker.io/org/app",
		"oci://docker.io/nginx":                          "docker.io/library/nginx",
		"nginx":                                          "docker.io/library/nginx",
		"nginx:1.27":                                     "docker.io/library/nginx",
		"org/app:v1":                                     "docker.io/org/app",
		"ghcr.io/octo-org/repo%2Fimage:v1":               "ghcr.io/octo-org/repo/image",
		"us-east1-docker.pkg.dev/p/r/img:v1":             "us-east1-docker.pkg.dev/p/r/img",
		"oci://registry.example.com./a":                  "registry.example.com/a",
		"harbor.example.com/library/shop-config:v1.2.0":  "harbor.example.com/library/shop-config",
		"myregistry.azurecr.io/team/app@sha256:80f0d5c8": "myregistry.azurecr.io/team/app",
		"oci://myreg:443/a":                              "myreg:443/a", // without a dot its port keeps it a host
		"oci://localhost:443/a":                          "localhost/a",
	} {
		got, err := NormalizeOCIRepository(in)
		if err != nil || got != want {
			t.Errorf("NormalizeOCIRepository(%q) = %q, %v; want %q", in, got, err, want)
		}
		if again, err := NormalizeOCIRepository(got); err != nil || again != got {
			t.Errorf("NormalizeOCIRepository(%q) = %q, %v: not idempotent", got, again, err)
		}
	}
	for _, bad := range []string{
		"", "oci://", "oci://ghcr.io", "oci://ghcr.io/", "ftp://ghcr.io/a", "oci://user:pw@ghcr.io/a",
		"oci://ghcr.io:0/a", "oci://ghcr.io:99999/a", "oci://gh cr.io/a", "oci://ghcr.io/a b", "oci://[zz]/a",
		"oci://ghcr.io/%zz", "oci://ghcr.io/a/..", "http../0/0", "oci://myreg/a",
	} {
		if got, err := NormalizeOCIRepository(bad); err == nil {
			t.Errorf("NormalizeOCIRepository(%q) = %q, want an error", bad, got)
		}
	}
}

// registryHandler is a receiver taking registries' notifications for two targets of
// registry.example.com:5000/team/app-config and one of ghcr.io/octo-org/shop-config, with
// the Git route beside it.
func registryHandler(opts WebhookOptions) (http.Handler, *fakeTrigger, *fakeTrigger) {
	oci, git := &fakeTrigger{}, &fakeTrigger{}
	opts.Registry = &WebhookRoute{Trigger: oci, Targets: fakeTargets{
		"registry.example.com:5000/team/app-config": {
			{Key: "app-config", Secret: []byte("s3cret"), Name: "team/app"},
			{Key: "app-config-other", Secret: []byte("other"), Name: "other/app"},
		},
		"ghcr.io/octo-org/shop-config":    {{Key: "shop", Secret: []byte("gh-secret"), Name: "shop/config"}},
		"docker.io/svendowideit/testhook": {{Key: "hub", Secret: []byte("hub-token"), Name: "team/hub"}},
	}}
	h := NewWebhookHandler(fakeTargets{"github.com/org/app": {{Key: "git", Secret: []byte("s3cret")}}}, git, opts)
	return h, oci, git
}

// TestRegistryWebhook: a notification triggers the targets of the repository it names
// whose token it carries — Authorization: Bearer, the bare Authorization, the token in the
// path, or a signature as Git pushes are signed — and nothing else; a wrong token, none, or
// an unknown repository are refused alike; pulls are answered 200 and trigger nothing.
func TestRegistryWebhook(t *testing.T) {
	t.Parallel()
	unknown := strings.ReplaceAll(distributionPush, "team/app-config", "team/unknown")
	for _, tc := range []struct {
		name, path, body string
		headers          map[string]string
		want             int
		keys             []Key
	}{
		{name: "distribution, bearer", body: distributionPush, want: 202, keys: []Key{"app-config"},
			headers: map[string]string{"Authorization": "Bearer s3cret"}},
		{name: "harbor-style bare authorization", body: strings.ReplaceAll(harborPush, "harbor.example.com/library/shop-config", "registry.example.com:5000/team/app-config"),
			want: 202, keys: []Key{"app-config-other"}, headers: map[string]string{"Authorization": "other"}},
		{name: "docker hub, token in the path", path: "/hub-token", body: dockerHubPush, want: 202, keys: []Key{"hub"}},
		{name: "github package, signed", body: githubPackage, want: 202, keys: []Key{"shop"},
			headers: map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex("gh-secret", githubPackage), "X-GitHub-Event": "package"}},
		{name: "generic signature", body: distributionPush, want: 202, keys: []Key{"app-config"},
			headers: map[string]string{"X-Signature": "sha256=" + hmacHex("s3cret", distributionPush)}},
		{name: "wrong bearer", body: distributionPush, want: 401, headers: map[string]string{"Authorization": "Bearer guess"}},
		{name: "wrong path token", path: "/guess", body: dockerHubPush, want: 401},
		{name: "another target's token", path: "/s3cret", body: dockerHubPush, want: 401},
		{name: "github package, signed for another body", body: githubPackage, want: 401,
			headers: map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex("gh-secret", githubRegistryPackage)}},
		{name: "no token", body: distributionPush, want: 401},
		{name: "empty path token", path: "/", body: dockerHubPush, want: 401},
		{name: "unknown repository", body: unknown, want: 401, headers: map[string]string{"Authorization": "Bearer s3cret"}},
		{name: "pulls", body: distributionPulls, want: 200, headers: map[string]string{"Authorization": "Bearer s3cret"}},
		{name: "a git push", body: githubPush, want: 400, headers: map[string]string{"Authorization": "Bearer s3cret"}},
		{name: "oversized", body: `{"events":"` + strings.Repeat("a", 3<<20) + `"}`, want: 413,
			headers: map[string]string{"Authorization": "Bearer s3cret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			h, oci, git := registryHandler(WebhookOptions{})
			req := httptest.NewRequest(http.MethodPost, OCIWebhookPath+tc.path, strings.NewReader(tc.body))
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			g.Expect(rec.Code).To(Equal(tc.want), rec.Body.String())
			g.Expect(oci.triggered()).To(Equal(tc.keys))
			g.Expect(git.triggered()).To(BeEmpty())
		})
	}
}

// TestRegistryWebhookRefusalsLookAlike: a wrong token for a followed repository and any
// token for an unknown one get the same answer, the one a Git push with a wrong signature
// gets; neither the answer nor the log shows a token.
func TestRegistryWebhookRefusalsLookAlike(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	var logs strings.Builder
	h, oci, _ := registryHandler(WebhookOptions{Log: funcr.New(func(prefix, args string) {
		logs.WriteString(prefix + args + "\n")
	}, funcr.Options{Verbosity: 9})})
	call := func(path, body string, header map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	wrong := call(OCIWebhookPath+"/path-guess", distributionPush, map[string]string{"Authorization": "Bearer bearer-guess"})
	unknown := call(OCIWebhookPath+"/path-guess", strings.ReplaceAll(distributionPush, "app-config", "nothing"), map[string]string{"Authorization": "Bearer bearer-guess"})
	git := call(WebhookPath, githubPush, map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex("guess", githubPush)})
	g.Expect(wrong.Code).To(Equal(http.StatusUnauthorized))
	g.Expect(unknown.Code).To(Equal(wrong.Code))
	g.Expect(unknown.Body.String()).To(Equal(wrong.Body.String()))
	g.Expect(git.Body.String()).To(Equal(wrong.Body.String()))
	g.Expect(oci.triggered()).To(BeEmpty())

	accepted := call(OCIWebhookPath+"/s3cret", distributionPush, nil)
	g.Expect(accepted.Code).To(Equal(http.StatusAccepted))
	for _, tok := range []string{"path-guess", "bearer-guess", "s3cret"} {
		g.Expect(logs.String()).NotTo(ContainSubstring(tok))
		g.Expect(wrong.Body.String() + unknown.Body.String() + accepted.Body.String()).NotTo(ContainSubstring(tok))
	}
	g.Expect(logs.String()).To(ContainSubstring("webhook accepted"))
}

// TestRegistryWebhookRoutes: the Git route takes no bearer token; without Registry, the
// registry route does not exist; the rate limit of an address counts both routes.
func TestRegistryWebhookRoutes(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	h, _, git := registryHandler(WebhookOptions{RateLimit: 0.001, RateBurst: 1})
	req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(githubPush))
	req.Header.Set("Authorization", "Bearer s3cret")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusUnauthorized), "the Git route reads no Authorization")
	g.Expect(git.triggered()).To(BeEmpty())
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, WebhookPath+"/s3cret", strings.NewReader(githubPush)))
	g.Expect(rec.Code).To(Equal(http.StatusNotFound), "nor a token in the path")

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, OCIWebhookPath+"/s3cret", strings.NewReader(distributionPush)))
	g.Expect(rec.Code).To(Equal(http.StatusTooManyRequests), "the burst of 1 was spent on the Git route")

	plain := NewWebhookServer("", NewWebhookHandler(fakeTargets{}, &fakeTrigger{}, WebhookOptions{}))
	for _, p := range []string{OCIWebhookPath, OCIWebhookPath + "/s3cret"} {
		rec = httptest.NewRecorder()
		plain.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, p, strings.NewReader(distributionPush)))
		g.Expect(rec.Code).To(Equal(http.StatusNotFound), p)
	}
	srv := NewWebhookServer("", h)
	rec = httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, OCIWebhookPath+"/x", nil))
	g.Expect(rec.Code).To(Equal(http.StatusTooManyRequests), "the server routes /hooks/oci/<token> to the handler")
}

// FuzzRegistryPayloadRepositories: any body parses or fails without panicking, and what
// it names is normalized.
func FuzzRegistryPayloadRepositories(f *testing.F) {
	for _, seed := range []string{distributionPush, distributionPulls, acrPush, harborPush, harborCloudEvent, githubPackage,
		githubRegistryPackage, dockerHubPush, quayPush, garInsert, `{"message":{"data":"!!"}}`, `{}`, `[`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		repos, err := RegistryPayloadRepositories(body)
		if err != nil {
			return
		}
		if len(repos) == 0 || len(repos) > maxPayloadURLs {
			t.Fatalf("%d repositories", len(repos))
		}
		for _, r := range repos {
			if n, err := NormalizeOCIRepository(r); err != nil || n != r {
				t.Fatalf("%q normalizes to %q, %v", r, n, err)
			}
		}
	})
}
