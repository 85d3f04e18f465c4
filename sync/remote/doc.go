// Package remote sends a SyncTarget's objects to another cluster: the one its
// spec.kubeConfig Secret points at. It parses that kubeconfig with a tenant's input in
// mind, and keeps, per cluster, one shared set of what talking to it needs.
//
// # What a kubeconfig may hold
//
// The kubeconfig comes from a tenant (a Secret of the SyncTarget's namespace) and is read
// by the daemon, so only inline data is taken:
//
//   - server (https; http only with Options.AllowLoopback, which tests use), an optional
//     tls-server-name, certificate-authority-data, insecure-skip-tls-verify (allowed: it
//     weakens only the tenant's own connection, whose credentials it carries anyway);
//   - token, client-certificate-data and client-key-data, or username and password.
//
// Refused, each with an error that says why: exec plugins and auth providers (the daemon
// would run a tenant's command or call a cloud with its own identity), tokenFile and every
// file path (client-certificate, client-key, certificate-authority: the daemon's files are
// not a tenant's to read), proxy-url (a tenant would route the daemon's requests through a
// host of its choosing, past the address checks below), act-as (the daemon impersonates
// the SyncTarget's service account itself), and a server URL with credentials
// (user:password@), a query or a fragment. No error quotes what may hold a secret: a
// server is named by its host alone, an exec plugin's command, arguments and environment
// are not quoted, nor an auth provider's settings.
//
// # Where a remote cluster may be
//
// A cluster at a loopback, link-local, unspecified or multicast address (127.0.0.0/8, ::1,
// 169.254.0.0/16, fe80::/10, 0.0.0.0) is refused unless Options.AllowLoopback: a tenant must
// not reach, with the daemon's network position, the API server or kubelet of the daemon's
// own host. The cloud metadata services, which hand out the node's credentials, are refused
// always, AllowLoopback or not, link-local or not (169.254.169.254, 100.100.100.200 of
// Alibaba Cloud, 168.63.129.16 of Azure, fd00:ec2::254 of AWS, fd20:ce::254 of GCP and the
// others of netguard's list), and so are their NAT64 forms (64:ff9b::/96). Other private
// addresses are allowed, for that is where clusters are; Options.Networks (`converge serve
// --remote-cluster-cidrs`) confines clusters to the networks an operator names. The
// server's address is checked when the kubeconfig is parsed (a literal IP or "localhost")
// and again for every connection, on the address actually dialled, so that a name
// resolving to such an address is refused too. Connections go straight to the cluster,
// never through an HTTP proxy of the environment, for that check to see the real
// destination.
//
// # What a remote cluster may answer
//
// A kubeconfig may still point at any other server the daemon reaches, and what that
// server answers would be quoted back to the tenant in the SyncTarget's status. So the
// transport takes only what a Kubernetes API server answers (apiAnswers): a redirect is an
// error, never followed (client-go would follow it, its token with it, to any host and over
// http); an error answer whose body is not a Status, or a success answer of another media
// type than JSON or protobuf, is a NotAPIServerError naming the host, the status code and
// the media type, never the body; and a JSON answer is read through a kindCheck, which
// fails the read of an answer holding no Kubernetes objects (client-go's decoders quote an
// object without a kind whole). Such an error is not a revision's fault.
//
// `converge tree` and `converge diff` (ForCaller) read the Secret with their user's rights
// and apply the same refusals, loopback aside: they run on the user's machine, with the
// network position the user has anyway, where a local cluster (kind) is at 127.0.0.1. The
// web UI's pending diff, which may run beside the daemon, refuses loopback as it does.
//
// # A cluster that is away
//
// Connections are bounded (DialTimeout, TLSHandshakeTimeout, ResponseHeaderTimeout, and
// HTTP/2 health pings), and a connection that fails is an UnreachableError naming the
// kubeconfig Secret. It, a kubeconfig Secret missing or refused (ConfigError), a refused
// address and a server that does not answer as an API server are not a revision's fault
// (their category, package category, is Retry): the SyncTarget is retried with the reconciler's backoff, each
// cluster on its own, and the retry after the cluster is back deploys; its drift informers
// re-list by themselves.
//
// # One set per cluster
//
// Clusters keeps, per kubeconfig content (its SHA-256), one Cluster: the transport, a
// lazily discovering REST mapper, a client and a health checker per impersonated user, and
// a drift watcher. Each SyncTarget holds the Cluster it last acquired; a SyncTarget that is
// released (deleted, or moved to another cluster or a rotated Secret) lets go of it, and the
// last one to let go closes it: its drift informers stop and its idle connections close.
package remote
