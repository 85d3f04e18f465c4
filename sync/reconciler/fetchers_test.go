package reconciler

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/reconciler/reconcilertest"
)

// TestSourceFetchersServeEachSourceByItsKind: a SyncTarget with spec.chart is served by
// the chart fetcher, every other by Git; without a chart fetcher a chart target is told so
// at every step; both forget a SyncTarget that is gone.
func TestSourceFetchersServeEachSourceByItsKind(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	git, charts := reconcilertest.NewFetcher(rev1), reconcilertest.NewFetcher("0.1.0@sha256:"+sha256Hex)
	f := SourceFetchers{Git: git, Chart: charts}
	yaml := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"}}
	chart := yaml.DeepCopy()
	chart.Spec.Chart = &convergev1.ChartSource{}

	rev, err := f.Resolve(ctx, yaml)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rev).To(Equal(rev1))
	rev, ready, err := f.ResolveFresh(ctx, chart, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ready).To(BeTrue())
	g.Expect(rev).To(HavePrefix("0.1.0@"))
	dir, err := f.Checkout(ctx, chart, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dir).To(ContainSubstring(rev))
	_, err = f.Verify(ctx, yaml, rev1)
	g.Expect(err).NotTo(HaveOccurred())
	_, known := f.CommitTime(yaml, rev1)
	g.Expect(known).To(BeFalse())
	g.Expect(git.Resolves()).To(Equal(1))
	g.Expect(charts.Resolves()).To(Equal(1))

	key := client.ObjectKeyFromObject(yaml)
	f.Forget(key)
	g.Expect(git.Forgotten()).To(ConsistOf(key))
	g.Expect(charts.Forgotten()).To(ConsistOf(key), "its source may have changed kind")
	g.Expect(f.Wakeups()).To(BeNil(), "the fake Git fetcher wakes none")

	gitOnly := SourceFetchers{Git: git}
	_, err = gitOnly.Resolve(ctx, chart)
	g.Expect(errors.Is(err, errNoChartFetcher)).To(BeTrue())
	_, ready, err = gitOnly.ResolveFresh(ctx, chart, time.Now())
	g.Expect(errors.Is(err, errNoChartFetcher) && ready).To(BeTrue())
	_, err = gitOnly.Checkout(ctx, chart, rev)
	g.Expect(errors.Is(err, errNoChartFetcher)).To(BeTrue())
	_, err = gitOnly.Verify(ctx, chart, rev)
	g.Expect(errors.Is(err, errNoChartFetcher)).To(BeTrue())
	_, known = gitOnly.CommitTime(chart, rev)
	g.Expect(known).To(BeFalse())
	gitOnly.Forget(key)
}

const sha256Hex = "e8d3f31aa4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"
