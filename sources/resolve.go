package sources

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
)

// Resolve asks the remote which commit src.Ref points at, with one ref listing (ls-remote) and
// no fetch. A branch resolves to its tip, a tag to its commit (annotated tags peeled), a semver
// constraint to the commit of the highest matching tag, a named ref to its target, an exact
// commit to itself (the listing then only proves the repository is reachable), and no ref to
// the remote's default branch.
//
// Errors are *Error values matching one of the Err* kinds; none contains credentials.
func Resolve(ctx context.Context, src Source) (Revision, error) {
	r, err := newRemote(src)
	if err != nil {
		return Revision{}, wrapErr(ctx, "list refs of", src.URL, newRedactor(src.URL, src.Auth), err)
	}
	ar, err := r.listRefs(ctx)
	if err != nil {
		return Revision{}, wrapErr(ctx, "list refs of", src.URL, r.red, err)
	}
	rev, err := resolveRef(ar, src.Ref)
	if err != nil {
		return Revision{}, wrapErr(ctx, "list refs of", src.URL, r.red, err)
	}
	return rev, nil
}

// resolveRef picks the commit ref designates among the advertised refs.
func resolveRef(ar *packp.AdvRefs, ref Ref) (Revision, error) {
	peel := func(name string) (string, bool) {
		if h, ok := ar.Peeled[name]; ok {
			return h.String(), true
		}
		h, ok := ar.References[name]
		return h.String(), ok
	}
	switch {
	case ref.Branch != "":
		h, ok := ar.References[plumbing.NewBranchReferenceName(ref.Branch).String()]
		if !ok {
			return Revision{}, fmt.Errorf("%w: branch %q does not exist", ErrRefNotFound, ref.Branch)
		}
		return Revision{Ref: ref.Branch, Commit: h.String()}, nil
	case ref.Tag != "":
		c, ok := peel(plumbing.NewTagReferenceName(ref.Tag).String())
		if !ok {
			return Revision{}, fmt.Errorf("%w: tag %q does not exist", ErrRefNotFound, ref.Tag)
		}
		return Revision{Ref: ref.Tag, Commit: c}, nil
	case ref.SemVer != "":
		return resolveSemVer(ar, ref.SemVer, peel)
	case ref.Commit != "":
		if len(ref.Commit) != 40 {
			return Revision{}, fmt.Errorf("%w: sha256 repositories are not supported", ErrInvalidSource)
		}
		return Revision{Commit: ref.Commit}, nil
	case ref.Name != "":
		c, ok := peel(ref.Name)
		if !ok && ref.Name == "HEAD" && ar.Head != nil {
			c, ok = ar.Head.String(), true
		}
		if !ok {
			return Revision{}, fmt.Errorf("%w: ref %q does not exist", ErrRefNotFound, ref.Name)
		}
		return Revision{Ref: ref.Name, Commit: c}, nil
	}
	// No ref: the default branch, named after the HEAD symref when the server says it.
	for _, v := range ar.Capabilities.Get(capability.SymRef) {
		if target, ok := strings.CutPrefix(v, "HEAD:"); ok {
			if h, ok := ar.References[target]; ok {
				return Revision{Ref: strings.TrimPrefix(target, "refs/heads/"), Commit: h.String()}, nil
			}
		}
	}
	if ar.Head != nil {
		return Revision{Ref: "HEAD", Commit: ar.Head.String()}, nil
	}
	return Revision{}, fmt.Errorf("%w: the remote has no default branch (HEAD)", ErrRefNotFound)
}

func resolveSemVer(ar *packp.AdvRefs, constraint string, peel func(string) (string, bool)) (Revision, error) {
	c, err := semver.NewConstraint(constraint)
	if err != nil {
		return Revision{}, fmt.Errorf("%w: semver constraint %q: %v", ErrInvalidSource, constraint, err)
	}
	names := make([]string, 0, len(ar.References))
	for name := range ar.References {
		if strings.HasPrefix(name, "refs/tags/") {
			names = append(names, name)
		}
	}
	sort.Strings(names) // ties between equal versions (v1.0.0, 1.0.0) go to the last name
	var best *semver.Version
	bestName := ""
	for _, name := range names {
		tag := strings.TrimPrefix(name, "refs/tags/")
		v, err := semver.NewVersion(tag)
		if err != nil || !c.Check(v) {
			continue
		}
		if best == nil || !v.LessThan(best) {
			best, bestName = v, tag
		}
	}
	if best == nil {
		return Revision{}, fmt.Errorf("%w: no tag matches semver %q", ErrRefNotFound, constraint)
	}
	commit, _ := peel("refs/tags/" + bestName)
	return Revision{Ref: bestName, Commit: commit}, nil
}
