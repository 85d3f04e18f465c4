package convert

import (
	"regexp"
	"strconv"
	"strings"
)

var (
	tmplRe     = regexp.MustCompile(`\{\{-?\s*(.*?)\s*-?\}\}`)
	paramRe    = regexp.MustCompile(`^[A-Za-z0-9_.\[\]/-]+$`)
	segmentRe  = regexp.MustCompile(`^path(?:\.segments)?\[([0-9]+)\]$`)
	indexRe    = regexp.MustCompile(`^index\s+\.path\.segments\s+([0-9]+)$`)
	identRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	argoParams = map[string]string{
		"nameNormalized":          "name",
		"path.basenameNormalized": "path.basename",
		// the pullRequest generator's
		"branch_slug":    "slug",
		"target_branch":  "targetBranch",
		"head_sha":       "headSHA",
		"head_short_sha": "shortSHA",
	}
)

// translateTree writes the Argo CD parameters of every string of v as converge's.
func (c *conv) translateTree(v any, path string, goTmpl bool) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = c.translateTree(e, joinPath(path, k), goTmpl)
		}
	case []any:
		for i, e := range x {
			x[i] = c.translateTree(e, path+"["+strconv.Itoa(i)+"]", goTmpl)
		}
	case string:
		return c.translate(x, path, goTmpl)
	}
	return v
}

func joinPath(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// translate writes Argo CD's {{name}} (fasttemplate) or {{.name}} (goTemplate)
// parameters as converge's {{ .name }}; an expression it cannot read is kept and commented.
func (c *conv) translate(s, path string, goTmpl bool) string {
	return tmplRe.ReplaceAllStringFunc(s, func(m string) string {
		expr := tmplRe.FindStringSubmatch(m)[1]
		p, ok := convergeParam(expr, goTmpl)
		if !ok {
			c.note(path, "the template expression %s is kept as written: check it against converge's parameters", m)
			return m
		}
		return "{{ " + p + " }}"
	})
}

// convergeParam is the Go template reference to the converge parameter an Argo CD one
// names: path[N] is path.segmentN, metadata.labels.K is labels.K.
func convergeParam(expr string, goTmpl bool) (string, bool) {
	if m := indexRe.FindStringSubmatch(expr); goTmpl && m != nil {
		return ".path.segment" + m[1], true
	}
	expr = strings.TrimPrefix(expr, ".")
	if !paramRe.MatchString(expr) {
		return "", false
	}
	if p, ok := argoParams[expr]; ok {
		expr = p
	}
	if m := segmentRe.FindStringSubmatch(expr); m != nil {
		return ".path.segment" + m[1], true
	}
	if strings.Contains(expr, "[") {
		return "", false
	}
	if rest, ok := strings.CutPrefix(expr, "metadata.labels."); ok {
		expr = "labels." + rest
	}
	return goRef(expr), true
}

// goRef is .a.b when every part is an identifier, else index .a "rest".
func goRef(name string) string {
	parts := strings.Split(name, ".")
	for _, p := range parts {
		if !identRe.MatchString(p) {
			if len(parts) > 1 && identRe.MatchString(parts[0]) {
				return "index ." + parts[0] + " " + `"` + strings.Join(parts[1:], ".") + `"`
			}
			return `index . "` + name + `"`
		}
	}
	return "." + name
}
