package fleet

import (
	"context"
	"errors"
	"path"
	"strconv"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// gitDirectoriesGenerator yields a parameter set per directory of a Git source that its
// globs match (env.Dirs lists them), read again when the listing says.
type gitDirectoriesGenerator struct {
	g *convergev1.GitDirectoriesGenerator
}

func (gd gitDirectoriesGenerator) generate(ctx context.Context, env Env) (Generated, error) {
	if env.Dirs == nil {
		return Generated{}, errors.New("no Git directory lister configured")
	}
	got, err := env.Dirs.List(ctx, client.ObjectKey{Namespace: env.Namespace, Name: env.Set}, gd.g)
	if err != nil {
		return Generated{}, err
	}
	out := Generated{Params: dirParams(got.Dirs), Recheck: got.Every}
	if got.Verified != "" {
		out.Verified = []string{got.Verified}
	}
	if got.Refused != "" {
		out.Refused = []string{got.Refused}
	}
	return out, nil
}

// dirParams are the parameters of directories: path, path.basename and path.segmentN.
func dirParams(dirs []string) []Params {
	out := make([]Params, 0, len(dirs))
	for _, d := range dirs {
		p := Params{"path": d, "path.basename": path.Base(d)}
		for i, seg := range strings.Split(d, "/") {
			p["path.segment"+strconv.Itoa(i)] = seg
		}
		out = append(out, p)
	}
	return out
}
