package sources

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/internal/gittest"
)

// A checkout knows when its commit was made: the commit to healthy latency starts there.
func TestCommitTimeOfACheckout(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	// A commit made a day ago, so that the time of the checkout cannot pass for it.
	when := time.Now().Add(-24 * time.Hour).Unix()
	f.repo.FastImport(t, strings.NewReader(fmt.Sprintf("commit refs/heads/main\ncommitter %s %d +0000\ndata 4\nold\n"+
		"M 100644 inline a.yaml\ndata 16\nkind: ConfigMap\n\n", gittest.Committer, when)))
	commit := f.repo.Head(t, "main")
	rev := Revision{Ref: "main", Commit: commit}
	_, ok := f.cache.CommitTime(f.src, rev)
	g.Expect(ok).To(BeFalse(), "not cached yet")

	_, err := f.cache.Checkout(ctx, f.src, rev)
	g.Expect(err).NotTo(HaveOccurred())
	got, ok := f.cache.CommitTime(f.src, rev)
	g.Expect(ok).To(BeTrue())
	g.Expect(got.Unix()).To(Equal(when), "the committer time of %s", commit)
}
