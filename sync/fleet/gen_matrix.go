package fleet

import (
	"context"
	"fmt"
	"maps"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// matrixGenerator is the product of its two generators (any two of the base ones), each
// pair merged (the second wins).
type matrixGenerator struct{ m *convergev1.MatrixGenerator }

func (mg matrixGenerator) generate(ctx context.Context, env Env) (Generated, error) {
	m := mg.m
	if len(m.Generators) != 2 {
		return Generated{}, fmt.Errorf("matrix: %d generators, want 2", len(m.Generators))
	}
	var sides [2]Generated
	for i, g := range m.Generators {
		gen, err := baseGeneratorOf(g)
		if err == nil {
			sides[i], err = gen.generate(ctx, env)
		}
		if err != nil {
			return Generated{}, fmt.Errorf("matrix[%d]: %w", i, err)
		}
	}
	a, b := sides[0], sides[1]
	p, err := Product(a.Params, b.Params)
	if err != nil {
		return Generated{}, err
	}
	var out Generated
	out.add("matrix[0]: ", Generated{Recheck: a.Recheck, Verified: a.Verified, Refused: a.Refused, Held: a.Held, PullRequests: a.PullRequests, comments: a.comments})
	out.add("matrix[1]: ", Generated{Recheck: b.Recheck, Verified: b.Verified, Refused: b.Refused, Held: b.Held, PullRequests: b.PullRequests, comments: b.comments})
	out.Params = p
	return out, nil
}

// Product is every pair of a and b merged, b's values winning on a shared name, in the
// order of a then b. It refuses more than MaxParamSets pairs before building any.
func Product(a, b []Params) ([]Params, error) {
	if len(a) > 0 && len(b) > MaxParamSets/len(a) {
		return nil, fmt.Errorf("matrix: %d × %d parameter sets exceed %d", len(a), len(b), MaxParamSets)
	}
	out := make([]Params, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			p := maps.Clone(x)
			if p == nil {
				p = Params{}
			}
			maps.Copy(p, y)
			out = append(out, p)
		}
	}
	return out, nil
}
