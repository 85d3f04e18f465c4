package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources"
)

// Secrets every scenario namespace holds.
const (
	httpSecret    = "git-http"  // username and password of the HTTP git server
	sshSecret     = "git-ssh"   // identity and known_hosts of the SSH git server
	webhookSecret = "push-hook" // token that signs push webhooks
	webhookToken  = "e2e-webhook-token"
)

// How a scenario runs next to the others.
const (
	parallel = false
	serial   = true
)

// scenario is one numbered scenario of the issue: its own namespaces and repositories,
// the latencies it measured, and the daemons whose logs explain a failure.
type scenario struct {
	t       *testing.T
	id      int
	ns      string // the SyncTargets, their Secrets and Events
	app     string // the target namespace of their objects
	started time.Time

	mu        sync.Mutex
	latencies []latency
	daemons   []*daemon
}

// run runs body as scenario id, next to the other parallel scenarios unless serial, and
// adds its result to the table TestMain prints.
func run(t *testing.T, id int, title string, serialOnly bool, body func(s *scenario)) {
	if !serialOnly {
		t.Parallel()
	}
	s := &scenario{t: t, id: id, ns: fmt.Sprintf("e2e-%02d", id), app: fmt.Sprintf("e2e-%02d-app", id),
		started: time.Now(), daemons: []*daemon{suite.daemon}}
	defer s.finish(title)
	s.setUp()
	body(s)
}

func (s *scenario) setUp() {
	for _, ns := range []string{s.ns, s.app} {
		s.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: httpSecret, Namespace: s.ns},
		Data: map[string][]byte{sources.SecretUsername: []byte(suite.gitUser), sources.SecretPassword: []byte(suite.gitPass)}})
	s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sshSecret, Namespace: s.ns},
		Data: map[string][]byte{sources.SecretIdentity: suite.sshKey, sources.SecretKnownHosts: suite.ssh.KnownHosts()}})
	s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: webhookSecret, Namespace: s.ns},
		Data: map[string][]byte{"token": []byte(webhookToken)}})
}

// finish records the result and, on failure, shows the SyncTargets and what the daemons
// logged about this scenario's namespace.
func (s *scenario) finish(title string) {
	res := result{id: s.id, title: title, wall: time.Since(s.started), outcome: "pass"}
	switch {
	case s.t.Failed():
		res.outcome = "FAIL"
	case s.t.Skipped():
		res.outcome = "skip"
	}
	s.mu.Lock()
	res.latencies = append(res.latencies, s.latencies...)
	daemons := append([]*daemon(nil), s.daemons...)
	s.mu.Unlock()
	results.add(res)
	if !s.t.Failed() {
		return
	}
	list := &convergev1.SyncTargetList{}
	if err := suite.k8s.List(context.Background(), list, client.InNamespace(s.ns)); err == nil {
		evs := &corev1.EventList{}
		_ = suite.k8s.List(context.Background(), evs, client.InNamespace(s.ns))
		for _, st := range list.Items {
			b, _ := json.MarshalIndent(st.Status, "", "  ")
			var lines []string
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == st.Name && e.InvolvedObject.Kind == convergev1.SyncTargetKind {
					lines = append(lines, fmt.Sprintf("%s %s %s: %s", eventTime(e).Format("15:04:05.000"), e.Type, e.Reason, e.Message))
				}
			}
			s.t.Logf("SyncTarget %s/%s status:\n%s\nevents:\n%s", st.Namespace, st.Name, b, strings.Join(lines, "\n"))
		}
	}
	for _, d := range daemons {
		s.t.Logf("daemon %s, lines about %s:\n%s\nits last lines:\n%s", d.name, s.ns,
			d.tail(60, `"`+s.ns+`"`, s.ns+"/"), d.tail(15))
	}
}

// latency records a measured duration for the results table.
func (s *scenario) latency(name string, d time.Duration) {
	s.t.Logf("latency %s: %s", name, d.Round(time.Millisecond))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latencies = append(s.latencies, latency{name: name, d: d})
}

// explainWith adds a daemon whose logs a failure shows.
func (s *scenario) explainWith(d *daemon) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.daemons = append(s.daemons, d)
}

func (s *scenario) create(obj client.Object) {
	s.t.Helper()
	if err := suite.k8s.Create(context.Background(), obj); err != nil {
		s.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// repo is a repository of the scenario on the suite's git servers.
type repo struct {
	*gittest.Repo
	t *testing.T
}

func (s *scenario) repo(name string) *repo {
	return &repo{Repo: gittest.NewRepo(s.t, suite.gitRoot, fmt.Sprintf("e2e-%02d/%s", s.id, name)), t: s.t}
}

// httpURL is the clone URL on the HTTP server (basic auth, see httpSecret).
func (r *repo) httpURL() string { return suite.http.RepoURL(r.Repo) }

// sshURL is the clone URL on the SSH server (see sshSecret).
func (r *repo) sshURL() string { return suite.ssh.RepoURL(r.Repo) }

// commit writes files on main and returns the revision converge reports for the commit.
func (r *repo) commit(files map[string]string) string {
	r.t.Helper()
	return revision(r.Commit(r.t, "main", files))
}

// remove deletes files on main and returns the revision.
func (r *repo) remove(paths ...string) string {
	r.t.Helper()
	changes := make([]gittest.Change, 0, len(paths))
	for _, p := range paths {
		changes = append(changes, gittest.Change{Path: p, Delete: true})
	}
	return revision(r.CommitChanges(r.t, "main", changes...))
}

func revision(sha string) string { return "main@sha1:" + sha }

// syncTarget creates a SyncTarget following main of r over HTTP with basic auth, applying
// deploy/ into the scenario's app namespace with prune, polling every 2 s and a 30 s
// timeout, changed by mutate. It is deleted when the test ends.
func (s *scenario) syncTarget(name string, r *repo, mutate func(*convergev1.SyncTarget)) *convergev1.SyncTarget {
	s.t.Helper()
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{
				URL:       r.httpURL(),
				Ref:       convergev1.GitRef{Branch: "main"},
				SecretRef: &convergev1.LocalObjectReference{Name: httpSecret},
				Interval:  &metav1.Duration{Duration: 2 * time.Second},
			},
			Path:            "deploy",
			TargetNamespace: s.app,
			Prune:           true,
			Timeout:         &metav1.Duration{Duration: 30 * time.Second},
		},
	}
	if mutate != nil {
		mutate(st)
	}
	s.create(st)
	// Deleting it stops its polls; what it applied is pruned in the background.
	s.t.Cleanup(func() { _ = suite.k8s.Delete(context.Background(), st) })
	return st
}

// get reads the SyncTarget as it is now.
func get(g Gomega, st *convergev1.SyncTarget) *convergev1.SyncTarget {
	out := &convergev1.SyncTarget{}
	g.Expect(suite.k8s.Get(context.Background(), client.ObjectKeyFromObject(st), out)).To(Succeed())
	return out
}

// condition returns the condition of type typ, or an empty one.
func condition(st *convergev1.SyncTarget, typ string) metav1.Condition {
	if c := apimeta.FindStatusCondition(st.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func ready(st *convergev1.SyncTarget) metav1.Condition {
	return condition(st, convergev1.ReadyCondition)
}

// eventually polls the SyncTarget every 100 ms until check passes.
func (s *scenario) eventually(st *convergev1.SyncTarget, timeout time.Duration, check func(g Gomega, st *convergev1.SyncTarget)) {
	s.t.Helper()
	NewWithT(s.t).Eventually(func(g Gomega) { check(g, get(g, st)) }).
		WithTimeout(timeout).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// healthy checks that the SyncTarget applied rev and found it healthy.
func healthy(g Gomega, st *convergev1.SyncTarget, rev string) {
	g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), "Ready: %s", ready(st).Message)
	g.Expect(st.Status.LastAppliedRevision).To(Equal(rev))
	g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
	g.Expect(condition(st, convergev1.HealthyCondition).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(st.Status.ObservedGeneration).To(Equal(st.Generation))
	g.Expect(st.Status.History).NotTo(BeEmpty())
	g.Expect(st.Status.History[0]).To(And(HaveField("Revision", rev), HaveField("Result", convergev1.SyncSucceeded)))
}

// waitHealthy waits for rev to be applied and healthy and returns how long that took.
func (s *scenario) waitHealthy(st *convergev1.SyncTarget, rev string, timeout time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	s.eventually(st, timeout, func(g Gomega, st *convergev1.SyncTarget) { healthy(g, st, rev) })
	return time.Since(start)
}

// events lists the Events about the SyncTarget.
func events(g Gomega, st *convergev1.SyncTarget) []corev1.Event {
	list := &corev1.EventList{}
	g.Expect(suite.k8s.List(context.Background(), list, client.InNamespace(st.Namespace))).To(Succeed())
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == convergev1.SyncTargetKind && e.InvolvedObject.Name == st.Name {
			out = append(out, e)
		}
	}
	return out
}

// expectEvent waits for an Event about st of the type and reason whose message contains
// every one of parts.
func (s *scenario) expectEvent(st *convergev1.SyncTarget, typ, reason string, parts ...string) {
	s.t.Helper()
	msg := []types.GomegaMatcher{}
	for _, p := range parts {
		msg = append(msg, ContainSubstring(p))
	}
	NewWithT(s.t).Eventually(func(g Gomega) {
		g.Expect(events(g, st)).To(ContainElement(And(
			HaveField("Type", typ), HaveField("Reason", reason), HaveField("Message", And(msg...)))))
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(),
		"an event %s/%s about %s", typ, reason, st.Name)
}

// object reads an object of the cluster into obj.
func object(g Gomega, ns, name string, obj client.Object) {
	g.Expect(suite.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed())
}

// gone checks that the object does not exist.
func gone(g Gomega, ns, name string, obj client.Object) {
	goneIn(g, suite.k8s, ns, name, obj)
}

// goneIn checks that the object does not exist in the cluster c reads.
func goneIn(g Gomega, c client.Reader, ns, name string, obj client.Object) {
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s/%s: want NotFound, got %v", obj, ns, name, err)
}

func configMapValue(g Gomega, ns, name string) string {
	cm := &corev1.ConfigMap{}
	object(g, ns, name, cm)
	return cm.Data["value"]
}

// pushWebhook announces a push of r as a generic sender signed with token would, and
// returns the HTTP status of the answer.
func pushWebhook(g Gomega, r *repo, token string) int {
	return pushWebhookTo(g, suite.webhookURL, r, token)
}

// pushWebhookTo sends the push webhook to the receiver at base ("http://host:port").
func pushWebhookTo(g Gomega, base string, r *repo, token string) int {
	return postHook(g, base, r.httpURL(), token).code
}

// cliResult is what one run of the converge CLI printed and its exit code.
type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit code %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// cli runs the converge CLI against the suite's cluster, without a terminal.
func (s *scenario) cli(timeout time.Duration, args ...string) cliResult {
	s.t.Helper()
	return s.command(timeout, append(args, "--kubeconfig", suite.cluster.Kubeconfig)...)
}

// command runs the converge CLI with args as they are: for the commands that reach no
// cluster (push, tag and list artifacts), which take no --kubeconfig.
func (s *scenario) command(timeout time.Duration, args ...string) cliResult {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.binary, args...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "TERM=dumb", "KUBECONFIG="+suite.cluster.Kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		s.t.Fatalf("running converge %s: %v", strings.Join(args, " "), err)
	}
	s.t.Logf("$ converge %s\n%s", strings.Join(args, " "), res)
	return res
}

// expectOutput checks what a CLI command printed without ending the scenario, so that one
// missing word does not hide the checks after it.
func (s *scenario) expectOutput(res cliResult, pattern, what string) {
	s.t.Helper()
	if !regexp.MustCompile(pattern).MatchString(res.stdout + res.stderr) {
		s.t.Errorf("%s: the output does not match %q\n%s", what, pattern, res)
	}
}

// writeFiles writes files (path → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ownerLabels are the labels converge puts on what st applies.
func ownerLabels(st *convergev1.SyncTarget) client.MatchingLabels {
	return client.MatchingLabels{convergev1.NameLabel: st.Name, convergev1.NamespaceLabel: st.Namespace}
}
