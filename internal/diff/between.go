package diff

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/hooks"
)

// Between compares two renderings of the same SyncTarget without a cluster: what
// rendering after instead of before changes, object by object (by group, kind, namespace
// and name), each Object's Diff the unified diff of its two renderings, Secret values
// masked, its sides named "before" and "after". An object only after is created, one only before is pruned (as the daemon
// would, prune rules and policies aside), one rendered the same is unchanged. Hooks are
// left out, as Compute leaves them: they are run, never kept. The result is in Result's
// order.
func Between(before, after []*unstructured.Unstructured) (*Result, error) {
	before, _ = hooks.Split(before)
	after, _ = hooks.Split(after)
	old := make(map[string]*unstructured.Unstructured, len(before))
	for _, o := range before {
		old[apply.ObjectID(o)] = o
	}
	res := &Result{}
	for _, o := range after {
		id := apply.ObjectID(o)
		was, ok := old[id]
		delete(old, id)
		action := Create
		if ok {
			action = Change
		}
		v, err := verdict(action, o, was, o, "")
		if err != nil {
			return nil, err
		}
		if ok && v.Diff == "" {
			v.Action = Unchanged
		}
		res.Objects = append(res.Objects, renamed(v))
	}
	for _, o := range before {
		if _, gone := old[apply.ObjectID(o)]; !gone {
			continue
		}
		v, err := verdict(Prune, o, o, nil, "")
		if err != nil {
			return nil, err
		}
		res.Objects = append(res.Objects, renamed(v))
	}
	sortObjects(res.Objects)
	return res, nil
}

// renamed names the sides of o's diff as two renderings: before and after, not live and
// merged.
func renamed(o Object) Object {
	o.Diff = strings.Replace(o.Diff, "--- "+liveName+"\n+++ "+mergedName+"\n", "--- before\n+++ after\n", 1)
	return o
}

// Redact replaces, in every note and diff of r, each of values (of four characters or
// more, as apply.RedactString does) by "[redacted]": the values a rendering read from
// Secrets and SOPS files, which may reach objects other than Secrets (a variable
// substituted into a ConfigMap) where masking does not reach.
func Redact(r *Result, values []string) {
	if len(values) == 0 {
		return
	}
	for i := range r.Objects {
		r.Objects[i].Diff = apply.RedactString(r.Objects[i].Diff, values)
		r.Objects[i].Note = apply.RedactString(r.Objects[i].Note, values)
	}
}

// Trim keeps the diffs of r's changes (in order) while they add up to at most maxBytes,
// and leaves out the rest, each noted: for a reader with a size limit, such as a pull
// request's comment. It returns how many diffs it left out.
func Trim(r *Result, maxBytes int) int {
	left, used := 0, 0
	for i := range r.Objects {
		o := &r.Objects[i]
		if o.Diff == "" {
			continue
		}
		if used+len(o.Diff) <= maxBytes {
			used += len(o.Diff)
			continue
		}
		o.Diff = ""
		o.Note = joinNotes(o.Note, "diff left out: too long to show here")
		left++
	}
	return left
}
