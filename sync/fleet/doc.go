// Package fleet is the SyncTargetSet controller: it generates many SyncTargets from one
// template, as Argo CD's ApplicationSet generates Applications.
//
// # Generators
//
// Each generator yields parameter sets (name → string value):
//
//   - list: its elements.
//   - clusters: one per Secret of the set's namespace labelled converge.dev/cluster and
//     matching the selector: name (the label's value, or the Secret's name when empty),
//     secretName, and labels.<key> per label. Only the Secrets' metadata is listed, by
//     label, through the uncached API reader: nothing watches Secrets, so a new cluster is
//     seen within a minute (the set is read again every DefaultInterval).
//   - gitDirectories: one per directory of the source's current commit whose path matches
//     an include glob and no exclude glob (path.Match: "*" stays within a segment): path,
//     path.basename, and path.segment0..N. The source is polled at its interval (a
//     schedule is read as the default interval) with the credentials of the set's namespace.
//     With source.verify, a commit is listed only once its signatures verify with the
//     trusted keys of the set's namespace, as a SyncTarget's revision is verified, and
//     before it is checked out: a commit that does not verify leaves the directories of the
//     last one that did (SourceVerified=False, Ready=False with reason VerificationFailed,
//     both saying why); without one, the set fails with that reason and writes or deletes
//     nothing. The template's own source.verify applies to the generated SyncTargets only.
//   - matrix: every pair of its two generators' sets, merged (the second wins).
//
// At most MaxParamSets parameter sets are generated. Each generator is a type of its own
// behind the generator interface, in a file of its own (gen_*.go); generatorOf maps the
// API's one-of fields onto them, and a matrix combines any two of the base ones.
//
// # Templates
//
// Every string of template.metadata and template.spec is a Go text/template executed with
// the parameter set as data and missingkey=error: {{ .name }}. Map keys are not templated.
// A dotted parameter is both under its full name, {{ index . "path.basename" }}, and
// nested on its dots, {{ .path.basename }}; a parameter that is also the prefix of others
// ({{ .path }} beside {{ .path.basename }}) prints as its own value. The functions are
// lower, upper, trimPrefix, trimSuffix, replace, trunc and default beside the built-ins
// index, len, not, and, or, eq, ne, lt, le, gt and ge; call, print, printf, println,
// html, js, urlquery and slice are refused, and so are range, template, define and block:
// a template runs in time linear in its text.
//
// Whoever may create a set writes its template, so a render is bounded before any
// rendering is validated: one SyncTarget renders to at most MaxRenderedBytes and all of a
// set's to MaxSetRenderedBytes (strings, keys and values counted as their JSON text, as
// the template writes them: the writer refuses the byte past a bound); the template's
// nodes times the parameter sets are at most MaxTemplateWork; the functions' results and
// what they read add up to at most eight times MaxSetRenderedBytes, and no result may be
// larger than one SyncTarget (replace refuses one before building it); and the render
// stops at RenderTimeout, checked at every template string, function call and write. A
// bound passed makes the set TemplateInvalid, saying which, and nothing is written. Sets
// are reconciled DefaultWorkers at once, so that a set that is slow to list its Git source
// or to render does not hold up the others.
//
// # Validation, writes and rollout
//
// Every rendering is validated before any SyncTarget is written: its name, its namespace
// (the set's own), a strict decoding into a SyncTarget, the CRD's schema and CEL rules (Schema,
// in process, against the CRD the binary carries), and a new SyncTarget's name against the
// cache (one held by a SyncTarget the set does not control is refused). A new SyncTarget is
// applied create-only (on a resourceVersion no object can have), so that a name taken since
// is refused by the API server too, never taken over. Writing N SyncTargets so costs N
// requests, and a new set's first SyncTarget is written without waiting for N dry-runs. One
// invalid rendering makes the set Ready=False with reason TemplateInvalid naming its
// parameter set, and nothing is written or deleted.
//
// SyncTargets are applied server-side (field owner FieldOwner) with the set as controller
// owner and the converge.dev/set label; the TemplateHashAnnotation says which rendering a
// SyncTarget has. One no longer generated is deleted, or released (owner reference and
// label removed) with preserveOnDeletion; a SyncTarget of a generated name the set does not
// own (one it released included) is never taken over: the set is TemplateInvalid; deleting the set lets the garbage collector
// delete its SyncTargets, or, with preserveOnDeletion, Finalizer releases them first.
//
// With a strategy, a change reaches the SyncTargets step by step: step k+1 is written once
// every SyncTarget of the steps up to k is Ready at its new generation, and no more than
// maxConcurrent are being updated at once. A SyncTarget that fails at its new rendering
// (Stalled, or Ready=False with a failure reason) stops the rollout: Ready=False with
// reason RolloutFailed names it. Generated SyncTargets only the set writes: a hand edit of
// a field the template sets is undone at the set's next change of that SyncTarget.
package fleet
