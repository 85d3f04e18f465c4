package fleet

import (
	"context"
	"maps"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// listGenerator yields its elements as they are written.
type listGenerator struct{ g *convergev1.ListGenerator }

func (l listGenerator) generate(context.Context, Env) (Generated, error) {
	return Generated{Params: listParams(l.g)}, nil
}

func listParams(l *convergev1.ListGenerator) []Params {
	out := make([]Params, 0, len(l.Elements))
	for _, e := range l.Elements {
		out = append(out, Params(maps.Clone(e)))
	}
	return out
}
