// Package convert carries Flux and Argo CD objects over to converge: Flux GitRepository or
// OCIRepository + Kustomization and HelmRepository/OCIRepository + HelmRelease become
// SyncTargets, Flux Alert + Provider become Notifiers, Argo CD Applications (of Git, of a
// chart or of an OCI artifact) become SyncTargets and ApplicationSets SyncTargetSets.
//
// Every field of the input is accounted for: it is mapped, or it gets a note (a
// "# converge convert:" comment in the printed YAML) when converge behaves differently,
// or it is a Problem when it cannot be carried over. Nothing is read from Secrets, and no
// field value is ever quoted in a Problem. What of the input a comment or a Problem holds
// (names, field names, expressions) has its line breaks and other unprintable characters
// escaped: it cannot end the comment and add YAML of its own to the output. An object whose
// name or namespace the API server would refuse is a Problem, and not converted.
package convert
