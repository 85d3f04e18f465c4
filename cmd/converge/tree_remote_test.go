package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestTreeAndDiffOfRemoteTargets: for a SyncTarget with spec.kubeConfig, `converge tree`
// and `converge diff` read its Secret with the user's rights and talk to that cluster (here
// the same API server, through its own kubeconfig); a kubeconfig with an exec plugin is
// refused before its command could run.
func TestTreeAndDiffOfRemoteTargets(t *testing.T) {
	t.Parallel()
	a := startAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	for _, ns := range []string{"remote-team", "remote-app"} {
		g.Expect(a.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	g.Expect(a.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "remote-app", Name: "settings"}})).To(Succeed())
	own, err := os.ReadFile(a.kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	kc, err := clientcmd.Load(own)
	g.Expect(err).NotTo(HaveOccurred())
	marker := filepath.Join(t.TempDir(), "ran")
	for _, u := range kc.AuthInfos {
		u.Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "touch", Args: []string{marker}}
	}
	withExec, err := clientcmd.Write(*kc)
	g.Expect(err).NotTo(HaveOccurred())
	for name, data := range map[string][]byte{"good": own, "exec": withExec} {
		g.Expect(a.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "remote-team", Name: name},
			Data: map[string][]byte{"value": data}})).To(Succeed())
		st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "remote-team", Name: name},
			Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: "https://git.example.com/shop.git", Ref: convergev1.GitRef{Branch: "main"}},
				KubeConfig: &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: name}}}}
		st.Status.LastAppliedRevision = "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
		st.Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{{ID: "remote-app_settings__ConfigMap", Version: "v1"}}}
		a.create(t, st)
	}

	out, errOut, code := cliRun(ctx, a.kubeconfig, "tree", "good", "-n", "remote-team")
	g.Expect(errOut).To(BeEmpty())
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(ContainSubstring("settings  Current"))

	_, errOut, code = cliRun(ctx, a.kubeconfig, "tree", "exec", "-n", "remote-team")
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(ContainSubstring("kubeconfig secret remote-team/exec: kubeconfig refused: exec plugins are not run"))
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: new\n"), 0o600)).To(Succeed())
	_, errOut, code = cliRun(ctx, a.kubeconfig, "diff", "--target", "exec", "-n", "remote-team", "--path", dir)
	g.Expect(code).To(Equal(2))
	g.Expect(strings.TrimSpace(errOut)).To(ContainSubstring("exec plugins are not run"))
	_, err = os.Stat(marker)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "the exec plugin's command ran")
}
