package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// rolloutStatus says how far the rollout of d is, by the rule of `kubectl rollout status`:
// done once the Deployment controller has observed the latest spec, every replica runs
// the new template, no old replica is left and every new one is available. It fails when
// the controller gave up (the progress deadline passed).
func rolloutStatus(d *appsv1.Deployment) (msg string, done bool, err error) {
	if d.Generation > d.Status.ObservedGeneration {
		return fmt.Sprintf("waiting for the Deployment controller to observe generation %d", d.Generation), false, nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return "", false, fmt.Errorf("the rollout exceeded its progress deadline: %s", c.Message)
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	switch {
	case s.UpdatedReplicas < want:
		return fmt.Sprintf("%d of %d replicas updated", s.UpdatedReplicas, want), false, nil
	case s.Replicas > s.UpdatedReplicas:
		return fmt.Sprintf("%d old replicas pending termination", s.Replicas-s.UpdatedReplicas), false, nil
	case s.AvailableReplicas < s.UpdatedReplicas:
		return fmt.Sprintf("%d of %d updated replicas available", s.AvailableReplicas, s.UpdatedReplicas), false, nil
	}
	return fmt.Sprintf("rolled out, %d of %d replicas available", s.AvailableReplicas, want), true, nil
}

// waitRollout waits until the Deployment's rollout is done, printing a line each time
// its progress changes. At the deadline of ctx it fails with the last progress and, when
// the daemon's pods are stuck (an image that cannot be pulled, a crash loop), why.
func waitRollout(ctx context.Context, c client.Client, out io.Writer, d *unstructured.Unstructured,
	interval time.Duration, timeout time.Duration) error {
	subject := fmt.Sprintf("Deployment/%s/%s", d.GetNamespace(), d.GetName())
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	var live appsv1.Deployment
	var getErr error
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		if getErr = c.Get(ctx, client.ObjectKeyFromObject(d), &live); getErr != nil {
			if apierrors.IsNotFound(getErr) || apierrors.IsForbidden(getErr) || apierrors.IsUnauthorized(getErr) {
				return false, fmt.Errorf("reading %s: %w", subject, getErr)
			}
			// Anything else may pass (a dropped connection, the client's rate limiter
			// near the deadline): try again until the deadline.
			return false, nil
		}
		msg, done, err := rolloutStatus(&live)
		if err != nil {
			return false, fmt.Errorf("%s: %w%s", subject, err, podProblems(ctx, c, &live))
		}
		if msg != last {
			last = msg
			if _, err := fmt.Fprintf(out, "%s: %s\n", subject, msg); err != nil {
				return false, err
			}
		}
		return done, nil
	})
	if err != nil && wait.Interrupted(err) && parent.Err() == nil {
		// The waited context is over; the pods are still worth a look.
		pctx, pcancel := context.WithTimeout(parent, 10*time.Second)
		defer pcancel()
		if last == "" && getErr != nil {
			last = "reading it: " + getErr.Error()
		}
		return fmt.Errorf("timed out after %s waiting for the rollout of %s: %s%s", timeout, subject, last, podProblems(pctx, c, &live))
	}
	return err
}

// podProblems is "; pod P: container C waiting: ImagePullBackOff (…)" for the pods of d
// that wait or restart, or "" (also when they cannot be listed: it only explains).
func podProblems(ctx context.Context, c client.Client, d *appsv1.Deployment) string {
	if d.Spec.Selector == nil {
		return ""
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return ""
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return ""
	}
	var problems []string
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "ContainerCreating":
				problems = append(problems, fmt.Sprintf("pod %s: container %s waiting: %s (%s)", p.Name, cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message))
			case cs.State.Terminated != nil:
				problems = append(problems, fmt.Sprintf("pod %s: container %s terminated: %s, exit code %d", p.Name, cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode))
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				problems = append(problems, fmt.Sprintf("pod %s: not scheduled: %s", p.Name, cond.Message))
			}
		}
		if len(problems) >= 3 {
			break
		}
	}
	if len(problems) == 0 {
		return ""
	}
	return "; " + strings.Join(problems, "; ")
}
