package e2e

import (
	"fmt"
	"regexp"
	"strings"
)

// The manifests scenarios commit, as a user would write them.

func configMap(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
}

// deployment is a Deployment whose pods kwok runs. With a nodeSelector matching no node
// it never becomes Available and reports ProgressDeadlineExceeded after 5 s; without one
// its progress deadline is 60 s, so that pods a loaded machine starts slowly are not
// taken for a failed rollout.
func deployment(name string, replicas int, image, nodeSelector string) string {
	sel, deadline := "", 60
	if nodeSelector != "" {
		sel, deadline = "      nodeSelector:\n        "+nodeSelector+"\n", 5
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: %[2]d
  progressDeadlineSeconds: %[5]d
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
%[4]s      containers:
      - name: app
        image: %[3]s
`, name, replicas, image, sel, deadline)
}

// progressDeadline is a Deployment's manifest with its progress deadline line replaced by
// lines.
func progressDeadline(manifest, lines string) string {
	return progressDeadlineLine.ReplaceAllLiteralString(manifest, lines)
}

var progressDeadlineLine = regexp.MustCompile(`(?m)^  progressDeadlineSeconds: \d+$`)

func service(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %[1]s
spec:
  selector: {app: %[1]s}
  ports:
  - port: 80
    targetPort: 8080
`, name)
}

// podTemplate is the template of the workload kinds, indented for their spec.
func podTemplate(app, indent, restartPolicy string) string {
	t := fmt.Sprintf(`template:
  metadata:
    labels: {app: %[1]s}
  spec:
    restartPolicy: %[2]s
    containers:
    - name: main
      image: example.com/%[1]s:1
`, app, restartPolicy)
	lines := strings.Split(strings.TrimRight(t, "\n"), "\n")
	for i := range lines {
		lines[i] = indent + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// workloads has one of each kind the Kubernetes controllers manage, each of which kwok
// can make healthy: pods become Ready, a Job's pods complete.
func workloads() map[string]string {
	return map[string]string{
		"deploy/workloads/deployment.yaml": deployment("w-deploy", 2, "example.com/w-deploy:1", ""),
		"deploy/workloads/replicaset.yaml": `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: w-rs
spec:
  replicas: 2
  selector:
    matchLabels: {app: w-rs}
` + podTemplate("w-rs", "  ", "Always"),
		"deploy/workloads/statefulset.yaml": `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: w-sts
spec:
  replicas: 2
  serviceName: w-sts
  podManagementPolicy: Parallel
  selector:
    matchLabels: {app: w-sts}
` + podTemplate("w-sts", "  ", "Always"),
		"deploy/workloads/sts-service.yaml": `apiVersion: v1
kind: Service
metadata:
  name: w-sts
spec:
  clusterIP: None
  selector: {app: w-sts}
  ports:
  - port: 80
`,
		"deploy/workloads/daemonset.yaml": `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: w-ds
spec:
  selector:
    matchLabels: {app: w-ds}
` + podTemplate("w-ds", "  ", "Always"),
		"deploy/workloads/job.yaml": `apiVersion: batch/v1
kind: Job
metadata:
  name: w-job
spec:
  completions: 2
  parallelism: 2
  backoffLimit: 1
` + podTemplate("w-job", "  ", "Never"),
		"deploy/workloads/cronjob.yaml": `apiVersion: batch/v1
kind: CronJob
metadata:
  name: w-cron
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
` + podTemplate("w-cron", "      ", "Never"),
		"deploy/workloads/service.yaml": service("w-deploy"),
	}
}
