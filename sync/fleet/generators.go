package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// MaxParamSets caps the parameter sets (and so the SyncTargets) one set generates.
const MaxParamSets = 1000

// Directories lists the directories of a Git source; the controller's is a GitLister.
type Directories interface {
	// List returns the directories of g's source (read with the credentials of the set's
	// namespace) matching its include and not its exclude globs, and how long the answer
	// holds before the source is polled again.
	List(ctx context.Context, set client.ObjectKey, g *convergev1.GitDirectoriesGenerator) (Listing, error)
}

// Listing is a Directories' answer.
type Listing struct {
	// Dirs are the directories.
	Dirs []string
	// Every is how long the answer holds before the source is polled again.
	Every time.Duration
	// Verified says who signed the revision listed, when the source has verify.
	Verified string
	// Refused says why the source's current revision was not listed, its signatures not
	// verifying: Dirs are those of the last revision that verified.
	Refused string
}

// Env is what the generators read.
type Env struct {
	// Namespace of the set: clusters are its Secrets, Git credentials its Secrets.
	Namespace string
	// Set is the set's name: the lister of Git directories wakes it when its sources move.
	Set string
	// Secrets lists Secrets' metadata; an uncached reader (the API reader), so that only
	// the clusters generator lists Secrets, by label, and nothing watches them.
	Secrets client.Reader
	// Dirs lists Git directories.
	Dirs Directories
	// PullRequests lists the open pull requests of forges.
	PullRequests PullRequests
	// Now is the time (default: time.Now), for the ttl of pull requests.
	Now func() time.Time
}

// Generated is what the generators yielded: the parameter sets in order, and how long
// until a generator should be read again (0: only on a change of the set).
type Generated struct {
	Params  []Params
	Recheck time.Duration
	// Verified says, for each gitDirectories generator with verify, who signed the
	// revision it listed.
	Verified []string
	// Refused says, for each gitDirectories generator whose source's current revision did
	// not verify, why: it yielded the directories of the last revision that did.
	Refused []string
	// PullRequests are the pull requests pullRequests generators read, and what became of
	// each.
	PullRequests []convergev1.PullRequestState
	// Held says what a generator left out that the set's status should tell.
	Held []string
	// comments are the pull requests read, with the generator whose token comments on
	// them.
	comments []prComment
}

// add appends o's parameter sets and what it says, prefixed with where it comes from.
func (g *Generated) add(prefix string, o Generated) {
	g.Params = append(g.Params, o.Params...)
	g.Recheck = sooner(g.Recheck, o.Recheck)
	for _, v := range o.Verified {
		g.Verified = append(g.Verified, prefix+v)
	}
	for _, r := range o.Refused {
		g.Refused = append(g.Refused, prefix+r)
	}
	for _, h := range o.Held {
		g.Held = append(g.Held, prefix+h)
	}
	g.PullRequests = append(g.PullRequests, o.PullRequests...)
	g.comments = append(g.comments, o.comments...)
}

// Generate runs every generator of the set and concatenates their parameter sets.
func Generate(ctx context.Context, env Env, gens []convergev1.Generator) (Generated, error) {
	var out Generated
	for i, g := range gens {
		got, err := generate(ctx, env, g)
		if err != nil {
			return Generated{}, fmt.Errorf("generators[%d]: %w", i, err)
		}
		out.add(fmt.Sprintf("generators[%d]: ", i), got)
		if len(out.Params) > MaxParamSets {
			return Generated{}, fmt.Errorf("the generators yield more than %d parameter sets", MaxParamSets)
		}
	}
	return out, nil
}

func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// generator is one kind of generator: it yields its parameter sets from what env reads.
// Each lives in a file of its own; generatorOf is the one place that maps the API's
// one-of fields onto them.
type generator interface {
	generate(ctx context.Context, env Env) (Generated, error)
}

// generatorOf is the generator g sets.
func generatorOf(g convergev1.Generator) (generator, error) {
	if g.Matrix != nil {
		return matrixGenerator{g.Matrix}, nil
	}
	return baseGeneratorOf(convergev1.BaseGenerator{List: g.List, Clusters: g.Clusters, GitDirectories: g.GitDirectories,
		PullRequests: g.PullRequests})
}

// baseGeneratorOf is the generator g sets, of those a matrix combines.
func baseGeneratorOf(g convergev1.BaseGenerator) (generator, error) {
	switch {
	case g.List != nil:
		return listGenerator{g.List}, nil
	case g.Clusters != nil:
		return clustersGenerator{g.Clusters}, nil
	case g.GitDirectories != nil:
		return gitDirectoriesGenerator{g.GitDirectories}, nil
	case g.PullRequests != nil:
		return pullRequestsGenerator{g.PullRequests}, nil
	}
	return nil, errors.New("no generator set")
}

func generate(ctx context.Context, env Env, g convergev1.Generator) (Generated, error) {
	gen, err := generatorOf(g)
	if err != nil {
		return Generated{}, err
	}
	return gen.generate(ctx, env)
}
