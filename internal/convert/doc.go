// Package convert carries Flux and Argo CD objects over to converge: Flux GitRepository +
// Kustomization and HelmRepository/OCIRepository + HelmRelease become SyncTargets, Flux
// Alert + Provider become Notifiers, Argo CD Applications become SyncTargets and
// ApplicationSets SyncTargetSets.
//
// Every field of the input is accounted for: it is mapped, or it gets a note (a
// "# converge convert:" comment in the printed YAML) when converge behaves differently,
// or it is a Problem when it cannot be carried over. Nothing is read from Secrets, and no
// field value is ever quoted in a Problem.
package convert
