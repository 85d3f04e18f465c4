package sources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
)

// maxVerifications bounds the verifications a Verifier remembers; past it, it forgets them all.
const maxVerifications = 4096

// Verifier checks that revisions are signed by trusted keys, fetching their commit and tag
// objects through a Cache. It remembers each verification — success or a signature refused —
// per repository, revision, mode and keys, so that checking a revision again costs nothing.
// It is safe for concurrent use.
type Verifier struct {
	// Cache fetches the objects, within its caps and timeout.
	Cache *Cache

	mu   sync.Mutex
	done map[string]verified
}

type verified struct {
	v   Verification
	err error
}

// Verify checks the signatures mode asks for of rev, resolved from src: the commit for HEAD,
// the annotated tag rev.Ref names for Tag, both for TagAndHEAD. A lightweight tag or a branch
// fails Tag modes. It returns the signers, or an error matching ErrVerificationFailed (a
// *VerificationError naming the object and the key found) when the revision is not trusted;
// other errors are those of a fetch.
func (v *Verifier) Verify(ctx context.Context, src Source, rev Revision, mode VerifyMode, keys *TrustedKeys) (Verification, error) {
	id := v.Cache.repoDir(src.URL) + "\x00" + rev.String() + "\x00" + string(mode) + "\x00" + keys.Digest()
	v.mu.Lock()
	d, ok := v.done[id]
	v.mu.Unlock()
	if ok {
		return d.v, d.err
	}
	commit, tag, err := v.Cache.signedObjects(ctx, src, rev, mode.tag())
	if err != nil {
		return Verification{}, err
	}
	res, err := verifyObjects(keys, mode, commit, tag, rev.Ref)
	if err != nil && !errors.Is(err, ErrVerificationFailed) {
		return res, err
	}
	v.mu.Lock()
	if v.done == nil || len(v.done) >= maxVerifications {
		v.done = map[string]verified{}
	}
	v.done[id] = verified{v: res, err: err}
	v.mu.Unlock()
	return res, err
}

// signedObjects fetches the commit of rev and, with withTag, the annotated tag rev.Ref names,
// which must still point at the commit. The fetch asks for no trees or blobs when the server
// can filter; otherwise it is the fetch of a checkout, within the same caps.
func (c *Cache) signedObjects(ctx context.Context, src Source, rev Revision, withTag bool) (*object.Commit, *object.Tag, error) {
	red := newRedactor(src.URL, src.Auth)
	if !isHex(rev.Commit, 40) {
		return nil, nil, wrapErr(ctx, "fetch", src.URL, red,
			fmt.Errorf("%w: revision %q has no full sha1 commit", ErrInvalidSource, rev.String()))
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.FetchTimeout)
	defer cancel()
	commit, tag, err := c.fetchSigned(ctx, src, rev, withTag)
	var ve *VerificationError
	if err != nil && !errors.As(err, &ve) {
		return nil, nil, wrapErr(ctx, "fetch", src.URL, red, err)
	}
	if ve != nil {
		return nil, nil, ve
	}
	return commit, tag, nil
}

func (c *Cache) fetchSigned(ctx context.Context, src Source, rev Revision, withTag bool) (*object.Commit, *object.Tag, error) {
	r, err := newRemote(src)
	if err != nil {
		return nil, nil, err
	}
	s, done, err := r.session(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	ar, err := s.AdvertisedReferencesContext(ctx)
	if err != nil {
		return nil, nil, err
	}
	commitHash, want := plumbing.NewHash(rev.Commit), plumbing.NewHash(rev.Commit)
	if withTag {
		if want, err = annotatedTag(ar, rev); err != nil {
			return nil, nil, err
		}
	}
	tmp, err := os.MkdirTemp(c.tmp, "verify-")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	defer func() { _ = removeTree(tmp) }()
	objects, closeObjects, err := c.uploadPack(ctx, s, ar, want, tmp, packp.FilterTreeDepth(0))
	if err != nil {
		return nil, nil, err
	}
	defer closeObjects()
	commit, err := object.GetCommit(objects, commitHash)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading commit %s: %v", ErrFetchFailed, commitHash, err)
	}
	if !withTag {
		return commit, nil, nil
	}
	tag, err := object.GetTag(objects, want)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading tag %s: %v", ErrFetchFailed, rev.Ref, err)
	}
	if tag.TargetType != plumbing.CommitObject || tag.Target != commitHash {
		return nil, nil, fmt.Errorf("%w: tag %s points at %s %s, not at commit %s", ErrRefNotFound, rev.Ref,
			tag.TargetType, tag.Target, rev.Commit)
	}
	return commit, tag, nil
}

// annotatedTag is the hash of the annotated tag object rev.Ref names, which must peel to
// rev.Commit.
func annotatedTag(ar *packp.AdvRefs, rev Revision) (plumbing.Hash, error) {
	name := plumbing.NewTagReferenceName(rev.Ref).String()
	h, ok := ar.References[name]
	if rev.Ref == "" || !ok {
		return plumbing.ZeroHash, &VerificationError{Object: refObject(rev.Ref),
			Reason: "is not a tag: verify.mode Tag and TagAndHEAD need ref.tag or ref.semver"}
	}
	if h.String() == rev.Commit {
		return plumbing.ZeroHash, &VerificationError{Object: "tag " + rev.Ref,
			Reason: "is a lightweight tag: only an annotated tag carries a signature"}
	}
	if peeled, ok := ar.Peeled[name]; ok && peeled.String() != rev.Commit {
		// The tag moved since it was resolved: the next poll resolves it anew.
		return plumbing.ZeroHash, fmt.Errorf("%w: tag %s moved to commit %s", ErrRefNotFound, rev.Ref, peeled)
	}
	return h, nil
}
