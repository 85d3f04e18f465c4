package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// The manifests of the workloads, as a repository holds them: one object per file.

func configMapYAML(name, value string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: %s
  labels:
    app.kubernetes.io/part-of: converge-bench
data:
  value: %q
  config.yaml: |
    replicas: 3
    image: registry.example.com/%s:1.0.0
    feature-flags: [alpha, beta, gamma]
`, name, value, name)
}

// deploymentYAML is a Deployment of replicas 0 (no pods, but the controller-manager still
// rolls it out and reports its status); namespace is omitted when empty.
func deploymentYAML(name, namespace string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s%[2]s
  labels:
    app.kubernetes.io/name: %[1]s
spec:
  replicas: 0
  selector:
    matchLabels:
      app.kubernetes.io/name: %[1]s
  template:
    metadata:
      labels:
        app.kubernetes.io/name: %[1]s
    spec:
      containers:
      - name: app
        image: registry.example.com/%[1]s:1.0.0
        ports:
        - containerPort: 8080
`, name, nsLine(namespace))
}

func nsLine(namespace string) string {
	if namespace == "" {
		return ""
	}
	return "\n  namespace: " + namespace
}

func namespaceYAML(name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", name)
}

func serviceAccountYAML(name, namespace string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: %s%s\n", name, nsLine(namespace))
}

func serviceYAML(name, namespace string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %[1]s%[2]s
spec:
  selector:
    app.kubernetes.io/name: %[1]s
  ports:
  - name: http
    port: 80
    targetPort: 8080
`, name, nsLine(namespace))
}

func ingressYAML(name, namespace string) string {
	return fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: %[1]s%[2]s
spec:
  rules:
  - host: %[1]s.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: %[1]s
            port:
              number: 80
`, name, nsLine(namespace))
}

// manyNamespace is the namespace of the i-th SyncTarget of many.
func manyNamespace(i int) string { return fmt.Sprintf("bench-many-%04d", i) }

// manyFiles is the shape of fluxcd/flux-benchmark: under many/<i>/, a namespace of its own
// holding a Deployment (replicas 0), a ServiceAccount, a Service and an Ingress.
func manyFiles(n int) map[string]string {
	files := map[string]string{}
	for i := range n {
		ns, dir := manyNamespace(i), fmt.Sprintf("many/%04d/", i)
		files[dir+"namespace.yaml"] = namespaceYAML(ns)
		files[dir+"deployment.yaml"] = deploymentYAML("app", ns)
		files[dir+"serviceaccount.yaml"] = serviceAccountYAML("app", ns)
		files[dir+"service.yaml"] = serviceYAML("app", ns)
		files[dir+"ingress.yaml"] = ingressYAML("app", ns)
	}
	return files
}

func bigConfigMap(i int) string  { return fmt.Sprintf("cm-%04d", i) }
func bigDeployment(i int) string { return fmt.Sprintf("web-%03d", i) }

// bigFiles is big: configMaps ConfigMaps and deployments Deployments (replicas 0) under
// big/, without namespaces (the SyncTarget's targetNamespace sets them).
func bigFiles(configMaps, deployments int) map[string]string {
	files := map[string]string{}
	for i := range configMaps {
		files[fmt.Sprintf("big/configmaps/%s.yaml", bigConfigMap(i))] = configMapYAML(bigConfigMap(i), "v0")
	}
	for i := range deployments {
		files[fmt.Sprintf("big/deployments/%s.yaml", bigDeployment(i))] = deploymentYAML(bigDeployment(i), "")
	}
	return files
}

// renderedBig is big as one multi-document YAML file, what kubectl and the floor apply.
func renderedBig(files map[string]string) string {
	var b strings.Builder
	for _, p := range sortedKeys(files) {
		b.WriteString("---\n")
		b.WriteString(files[p])
	}
	return b.String()
}

// fetchStream is a git fast-import stream of the fetch workload's repository: files YAML
// files in directories of 100, then a history of 20 commits changing 20 files each, so that
// a shallow fetch has something to leave out.
func fetchStream(files int) string {
	var s strings.Builder
	rng := rand.New(rand.NewPCG(1, 2))
	file := func(i, rev int) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%05d\n  namespace: svc-%03d\n"+
			"  labels:\n    app.kubernetes.io/name: svc-%03d\n    app.kubernetes.io/part-of: converge-bench\n"+
			"data:\n  revision: \"%d\"\n  config.yaml: |\n    replicas: %d\n    image: registry.example.com/svc-%03d:%d.%d.%d\n"+
			"    feature-flags: [alpha, beta, gamma]\n    timeout: %ds\n",
			i, i/100, i/100, rev, rng.IntN(10), i/100, rev, i%7, i%13, 30+i%90)
	}
	const commits = 21
	for c := 1; c <= commits; c++ {
		fmt.Fprintf(&s, "commit refs/heads/main\ncommitter gittest <gittest@example.com> %d +0000\ndata 10\ncommit %03d\n", 1_700_000_000+c, c)
		n := files
		if c > 1 {
			n = min(20, files)
		}
		for k := range n {
			i := k
			if c > 1 {
				i = rng.IntN(files)
			}
			content := file(i, c)
			fmt.Fprintf(&s, "M 100644 inline svc-%03d/cm-%05d.yaml\ndata %d\n%s\n", i/100, i, len(content), content)
		}
		s.WriteString("\n")
	}
	return s.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
