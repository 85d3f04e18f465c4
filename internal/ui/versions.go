package ui

import (
	"net/http"

	"github.com/converge-gitops/converge/internal/diff"
	"github.com/converge-gitops/converge/sources/charts"
)

// versionsView lists the versions of a SyncTarget's chart that its range allows.
type versionsView struct {
	Range    string
	Versions []versionView
	Error    string
}

// versionView is one version; Deployed marks the one applied, Newer those above it.
type versionView struct {
	Version         string
	Deployed, Newer bool
}

// serveVersions lists the chart versions in the SyncTarget's range, read from its
// repository with its credentials read by the user (not in the cluster: they would be
// read with the server's rights).
func (s *Server) serveVersions(w http.ResponseWriter, r *http.Request) {
	st, err := s.readTarget(r.Context(), "get", keyOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := &versionsView{}
	switch {
	case st.Spec.Chart == nil:
		v.Error = "it deploys no chart of a chart repository"
	case s.opts.InCluster != nil:
		v.Range = st.Spec.Chart.Version
		v.Error = "the repository is not read here: run converge ui with your own credentials"
	default:
		v.Range = st.Spec.Chart.Version
		list, err := diff.ChartVersions(r.Context(), s.client, st)
		if err != nil {
			v.Error = s.explain(err)
			break
		}
		deployed := ""
		if res, err := charts.ParseRevision(st.Status.LastAppliedRevision); err == nil {
			deployed = res.Version
		}
		newer := deployed != ""
		for _, ver := range list {
			if ver == deployed {
				newer = false
			}
			v.Versions = append(v.Versions, versionView{Version: ver, Deployed: ver == deployed, Newer: newer && ver != deployed})
		}
	}
	if v.Range == "" && st.Spec.Chart != nil {
		v.Range = "*"
	}
	s.render(w, r, "versions", v)
}
