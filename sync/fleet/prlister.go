package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/netguard"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/forge"
)

// DefaultPullRequestInterval is how long a listing of pull requests holds when the
// generator sets no interval.
const DefaultPullRequestInterval = time.Minute

// permissionTTL is how long the forge's answer on an author's write access is kept.
const permissionTTL = 5 * time.Minute

// maxPosted caps the comments and statuses remembered as written; beyond it, all are
// forgotten and each is written once more (an unchanged comment costs a read then).
const maxPosted = 4096

// maxForgeClients caps the forge clients kept; beyond it, all are built anew.
const maxForgeClients = 256

// forgeTimeout bounds one listing: a forge that does not answer holds a set's worker no
// longer.
const forgeTimeout = 30 * time.Second

// ForgeLister lists the open pull requests of pullRequests generators on their forges,
// with the token of the set's namespace, and keeps each answer for the generator's
// interval, so that the reconciles an owned SyncTarget's status changes cause do not ask
// the forge again. A signed webhook of the repository (see HooksForRepo) drops the
// answers of the sets following it and wakes them.
type ForgeLister struct {
	// Reader reads the token Secrets (spec.generators[].pullRequests.tokenSecretRef).
	Reader client.Reader
	// Wake receives a set a webhook names.
	Wake chan event.GenericEvent
	// Clock is the time source (default: the real clock).
	Clock clock.PassiveClock
	// AllowLoopback lets a forge be at a loopback or link-local address (tests, and a
	// daemon run with --allow-loopback-clusters); otherwise those are refused when dialled.
	AllowLoopback bool
	// HTTP, when set, is the client used (tests); otherwise one with the address check.
	HTTP *http.Client

	mu      sync.Mutex
	posted  map[string][32]byte // the comment last written, by set, repository and number
	listed  map[prKey]prAnswer
	writers map[string]prWriter                  // by forge, repository and author
	hooks   map[string]map[client.ObjectKey]hook // by normalized repository URL
	clients map[string]*forge.Client             // by namespace, generator and token
	client  *http.Client
}

// prKey is a set and what one of its generators asks: an answer is never the answer to
// another question.
type prKey struct {
	set client.ObjectKey
	gen string
}

type prAnswer struct {
	listing PullRequestListing
	at      time.Time
}

type prWriter struct {
	can bool
	at  time.Time
}

// hook is a set following a repository, and the Secret that signs its webhooks.
type hook struct {
	secret string
}

// PullRequestHook is a set that a signed webhook of its repository wakes.
type PullRequestHook struct {
	// Set is the SyncTargetSet.
	Set client.ObjectKey
	// Secret is the Secret (of the set's namespace) whose "token" signs the webhooks.
	Secret client.ObjectKey
}

// HooksForRepo returns the sets whose pullRequests generators follow repo (a normalized
// URL, sources.NormalizeURL) and name a webhookSecretRef, as their last listing saw them.
func (l *ForgeLister) HooksForRepo(repo string) []PullRequestHook {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []PullRequestHook
	for set, h := range l.hooks[repo] {
		out = append(out, PullRequestHook{Set: set, Secret: client.ObjectKey{Namespace: set.Namespace, Name: h.secret}})
	}
	return out
}

// WakeSet drops the listings of set and reconciles it: a webhook signed with its Secret
// said that its pull requests changed.
func (l *ForgeLister) WakeSet(set client.ObjectKey) {
	l.mu.Lock()
	for k := range l.listed {
		if k.set == set {
			delete(l.listed, k)
		}
	}
	l.mu.Unlock()
	wakeSet(l.Wake, set)
}

// wakeSet has the controller reconcile set; a nil or full channel drops the wake (the
// set's interval, or its next change, reconciles it).
func wakeSet(wake chan<- event.GenericEvent, set client.ObjectKey) {
	if wake == nil {
		return
	}
	ev := event.GenericEvent{Object: &convergev1.SyncTargetSet{}}
	ev.Object.SetNamespace(set.Namespace)
	ev.Object.SetName(set.Name)
	select {
	case wake <- ev:
	default:
	}
}

// Forget drops what the lister keeps of a set that is gone or changed.
func (l *ForgeLister) Forget(set client.ObjectKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.listed {
		if k.set == set {
			delete(l.listed, k)
		}
	}
	for id := range l.posted {
		if strings.HasPrefix(id, set.String()+"\x00") {
			delete(l.posted, id)
		}
	}
	for repo, sets := range l.hooks {
		delete(sets, set)
		if len(sets) == 0 {
			delete(l.hooks, repo)
		}
	}
}

func (l *ForgeLister) now() time.Time {
	if l.Clock == nil {
		return time.Now()
	}
	return l.Clock.Now()
}

// List implements PullRequests.
func (l *ForgeLister) List(ctx context.Context, set client.ObjectKey, g *convergev1.PullRequestsGenerator) (PullRequestListing, error) {
	every := DefaultPullRequestInterval
	if g.Interval != nil && g.Interval.Duration > 0 {
		every = g.Interval.Duration
	}
	key := prKey{set: set, gen: generatorID(g)}
	l.remember(set, g)
	now := l.now()
	l.mu.Lock()
	if a, ok := l.listed[key]; ok && now.Sub(a.at) < every {
		l.mu.Unlock()
		out := a.listing
		out.Every = every - now.Sub(a.at)
		return out, nil
	}
	l.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, forgeTimeout)
	defer cancel()
	fc, err := l.forgeClient(ctx, set.Namespace, g)
	if err != nil {
		return PullRequestListing{}, err
	}
	prs, truncated, err := fc.OpenPullRequests(ctx)
	if err != nil {
		return PullRequestListing{}, fmt.Errorf("listing the pull requests of %s: %w", g.Repository, err)
	}
	writers := map[string]bool{}
	for _, pr := range prs {
		if !needsPermission(g, pr) {
			continue
		}
		if _, asked := writers[pr.Author]; asked {
			continue
		}
		can, err := l.canWrite(ctx, fc, g, pr)
		if err != nil {
			return PullRequestListing{}, fmt.Errorf("asking %s whether %q may write to %s: %w", g.Provider, pr.Author, g.Repository, err)
		}
		writers[pr.Author] = can
	}
	out := PullRequestListing{PRs: prs, Writers: writers, Truncated: truncated, Every: every}
	l.mu.Lock()
	if l.listed == nil {
		l.listed = map[prKey]prAnswer{}
	}
	l.listed[key] = prAnswer{listing: out, at: now}
	l.mu.Unlock()
	return out, nil
}

// remember notes that set follows the generator's repository, for its webhooks.
func (l *ForgeLister) remember(set client.ObjectKey, g *convergev1.PullRequestsGenerator) {
	if g.WebhookSecretRef == nil {
		return
	}
	repo, err := RepositoryURL(g)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hooks == nil {
		l.hooks = map[string]map[client.ObjectKey]hook{}
	}
	if l.hooks[repo] == nil {
		l.hooks[repo] = map[client.ObjectKey]hook{}
	}
	l.hooks[repo][set] = hook{secret: g.WebhookSecretRef.Name}
}

// canWrite asks the forge whether the author of pr may write to the repository, keeping
// the answer for permissionTTL.
func (l *ForgeLister) canWrite(ctx context.Context, fc *forge.Client, g *convergev1.PullRequestsGenerator, pr forge.PullRequest) (bool, error) {
	user := pr.Author
	if g.Provider == convergev1.GitLabForge {
		user = pr.AuthorID
	}
	if user == "" {
		return false, nil
	}
	id := string(g.Provider) + "\x00" + g.Address + "\x00" + g.Repository + "\x00" + user
	now := l.now()
	l.mu.Lock()
	w, ok := l.writers[id]
	l.mu.Unlock()
	if ok && now.Sub(w.at) < permissionTTL {
		return w.can, nil
	}
	can, err := fc.CanWrite(ctx, user)
	if err != nil {
		return false, err
	}
	l.mu.Lock()
	if l.writers == nil {
		l.writers = map[string]prWriter{}
	}
	l.writers[id] = prWriter{can: can, at: now}
	l.mu.Unlock()
	return can, nil
}

// forgeClient is a client of the generator's repository with the token of its Secret,
// kept for the token (so that the forge is asked who the token's user is once).
func (l *ForgeLister) forgeClient(ctx context.Context, namespace string, g *convergev1.PullRequestsGenerator) (*forge.Client, error) {
	token := ""
	if ref := g.TokenSecretRef; ref != nil {
		s := &corev1.Secret{}
		if err := l.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, s); err != nil {
			return nil, fmt.Errorf("reading the token Secret %q: %w", ref.Name, err)
		}
		t, ok := s.Data["token"]
		if !ok || len(t) == 0 {
			return nil, fmt.Errorf("the Secret %q has no \"token\" key", ref.Name)
		}
		token = strings.TrimSpace(string(t))
	}
	sum := sha256.Sum256([]byte(token))
	id := namespace + "\x00" + generatorID(g) + "\x00" + hex.EncodeToString(sum[:])
	l.mu.Lock()
	fc, ok := l.clients[id]
	l.mu.Unlock()
	if ok {
		return fc, nil
	}
	fc, err := forge.New(forge.Kind(g.Provider), g.Address, g.Repository, token, l.httpClient())
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.clients == nil || len(l.clients) >= maxForgeClients {
		l.clients = map[string]*forge.Client{}
	}
	l.clients[id] = fc
	l.mu.Unlock()
	return fc, nil
}

// httpClient is the client of every forge: with the address check unless AllowLoopback.
func (l *ForgeLister) httpClient() *http.Client {
	if l.HTTP != nil {
		return l.HTTP
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.client == nil {
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
		if !l.AllowLoopback {
			d.Control = refuseLocal
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		tr.DialContext = d.DialContext
		l.client = &http.Client{Transport: tr, Timeout: forgeTimeout}
	}
	return l.client
}

// refuseLocal is a dialer's Control: a forge may not be at a loopback, link-local (cloud
// metadata), unspecified or multicast address, whatever its name resolves to.
func refuseLocal(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refusing to connect to %s: not an IP address", address)
	}
	why := netguard.Forbidden(ap.Addr())
	if why != "" {
		return fmt.Errorf("refusing to connect to %s: it is %s; forges there are refused unless the daemon runs with --allow-loopback-clusters", ap, why)
	}
	return nil
}

// generatorID identifies what a generator asks the forge.
func generatorID(g *convergev1.PullRequestsGenerator) string {
	b, _ := json.Marshal(struct {
		P, A, R string
		T       *convergev1.LocalObjectReference
	}{string(g.Provider), g.Address, g.Repository, g.TokenSecretRef})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// publicWebHosts are the hosts whose repositories the public APIs hold.
var publicWebHosts = map[string]string{
	"api.github.com":    "github.com",
	"api.bitbucket.org": "bitbucket.org",
}

// RepositoryURL is the normalized URL (sources.NormalizeURL) of the generator's
// repository, as a push or pull-request webhook of the forge names it: the host of the
// forge's web pages and the repository's path.
func RepositoryURL(g *convergev1.PullRequestsGenerator) (string, error) {
	base := g.Address
	if base == "" {
		base = forge.PublicBase(forge.Kind(g.Provider))
	}
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("cannot read the forge address")
	}
	host := strings.ToLower(u.Hostname())
	if web, ok := publicWebHosts[host]; ok {
		host = web
	}
	return sources.NormalizeURL("https://" + host + "/" + g.Repository)
}

// Comment implements Comments: it writes body as converge's comment on pull request
// number unless the same body was written there last, through the forge of g with its
// token.
func (l *ForgeLister) Comment(ctx context.Context, set client.ObjectKey, g *convergev1.PullRequestsGenerator, number int, marker, body string) error {
	return l.once(ctx, set, g, fmt.Sprint(number), body, func(fc *forge.Client) error {
		_, err := fc.UpsertComment(ctx, number, marker, body)
		return err
	})
}

// Status implements Comments: it sets st on commit sha unless the same status was set
// there last.
func (l *ForgeLister) Status(ctx context.Context, set client.ObjectKey, g *convergev1.PullRequestsGenerator, sha string, st forge.Status) error {
	what := fmt.Sprintf("%s\x00%s\x00%s\x00%s", st.State, st.Context, st.Description, st.TargetURL)
	return l.once(ctx, set, g, sha+"\x00"+st.Context, what, func(fc *forge.Client) error {
		return fc.SetStatus(ctx, sha, st)
	})
}

// once writes through the forge of g, unless what it writes at where was written last.
func (l *ForgeLister) once(ctx context.Context, set client.ObjectKey, g *convergev1.PullRequestsGenerator, where, what string,
	write func(*forge.Client) error) error {
	id := fmt.Sprintf("%s\x00%s\x00%s", set, generatorID(g), where)
	sum := commentID(what)
	l.mu.Lock()
	same := l.posted[id] == sum
	l.mu.Unlock()
	if same {
		return nil
	}
	fc, err := l.forgeClient(ctx, set.Namespace, g)
	if err != nil {
		return err
	}
	if err := write(fc); err != nil {
		return err
	}
	l.mu.Lock()
	if l.posted == nil || len(l.posted) >= maxPosted {
		l.posted = map[string][32]byte{}
	}
	l.posted[id] = sum
	l.mu.Unlock()
	return nil
}
