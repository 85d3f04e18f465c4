package ui

import (
	"net/http"

	"github.com/converge-gitops/converge/internal/diff"
)

// valuesView is the values a SyncTarget's chart was rendered with, as a person may see
// them (render.ChartValues).
type valuesView struct {
	Revision           revisionView
	Supplied, Computed string
	Cut                bool
	Error              string
}

// serveValues shows the values of the chart a SyncTarget deploys, rendered at the
// revision it applied last (or, before any, the one it fetched): those converge passes
// to the chart and those merged with the chart's own. A value a Secret gave is masked and
// every value read from a Secret or a SOPS file redacted. The source and the valuesFrom
// referents are read with the user's credentials, so in the cluster it is refused, as
// the pending diff is.
func (s *Server) serveValues(w http.ResponseWriter, r *http.Request) {
	st, err := s.readTarget(r.Context(), "get", keyOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := &valuesView{}
	rev := st.Status.LastAppliedRevision
	if rev == "" {
		rev = st.Status.LastFetchedRevision
	}
	switch {
	case st.Spec.Chart == nil && st.Spec.Helm == nil:
		v.Error = "it deploys no Helm chart"
	case s.opts.InCluster != nil:
		v.Error = "the values are not read here: they need the source and the Secrets of spec.helm.valuesFrom read with your rights; " +
			"run converge ui with your own credentials"
	default:
		vals, fetched, err := diff.ChartValues(r.Context(), s.client, s.opts.Config, st, rev)
		if fetched != "" {
			v.Revision = revisionOf(st, fetched)
		}
		if err != nil {
			v.Error = s.explain(err)
			break
		}
		v.Supplied, v.Computed, v.Cut = vals.Supplied, vals.Computed, vals.Cut
	}
	s.render(w, r, "values", v)
}
