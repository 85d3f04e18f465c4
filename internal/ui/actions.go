package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/actions"
)

// ActionHeader must be on every action request: a page of another origin cannot set it
// without a CORS preflight, which this handler never grants.
const ActionHeader = "X-Converge-Action"

// actionResult is the answer to an action, shown in the page.
type actionResult struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
}

func (s *Server) serveAction(w http.ResponseWriter, r *http.Request) {
	if err := sameOrigin(r); err != nil {
		writeJSON(w, http.StatusForbidden, actionResult{Message: err.Error()})
		return
	}
	key := keyOf(r)
	if err := s.authorizeTarget(r.Context(), "patch", key.Namespace, key.Name); err != nil {
		writeJSON(w, statusOf(err), actionResult{Message: s.explain(err)})
		return
	}
	st := &convergev1.SyncTarget{}
	if err := s.client.Get(r.Context(), key, st); err != nil {
		writeJSON(w, statusOf(err), actionResult{Message: s.explain(err)})
		return
	}
	msg, err := s.act(r.Context(), r.PathValue("action"), r.FormValue("to"), st)
	if err != nil {
		writeJSON(w, statusOf(err), actionResult{Message: s.explain(err)})
		return
	}
	writeJSON(w, http.StatusOK, actionResult{OK: true, Message: msg})
}

// errUnknownAction is an action this handler does not know.
var errUnknownAction = errors.New("unknown action")

// act does what the CLI verb of the same name does, as the user.
func (s *Server) act(ctx context.Context, action, to string, st *convergev1.SyncTarget) (string, error) {
	key := fmt.Sprintf("%s/%s", st.Namespace, st.Name)
	requested := actions.NewRequestToken()
	switch action {
	case "reconcile":
		if st.Spec.Suspend {
			return "", actions.SuspendedError(keyOfTarget(st))
		}
		return "requested a reconcile of SyncTarget " + key, actions.RequestReconcile(ctx, s.client, st, requested)
	case "suspend":
		return "suspended SyncTarget " + key, actions.Suspend(ctx, s.client, st)
	case "resume":
		did, err := actions.Resume(ctx, s.client, keyOfTarget(st), requested)
		return "resumed SyncTarget " + key + ": " + strings.Join(did, ", "), err
	case "rollback":
		pinned, err := actions.Rollback(ctx, s.client, keyOfTarget(st), to, requested, st)
		what, restores := actions.Pinned(st)
		return fmt.Sprintf("pinned SyncTarget %s to %s %s (resume restores %s)", key, what, pinned, restores), err
	}
	return "", fmt.Errorf("%w %q", errUnknownAction, action)
}

// sameOrigin refuses a request that a page of another origin could have sent.
func sameOrigin(r *http.Request) error {
	if r.Header.Get(ActionHeader) == "" {
		return fmt.Errorf("missing header %s: actions are sent by the page's own script", ActionHeader)
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Errorf("cross-site request refused (%s)", site)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Errorf("request from origin %s refused", origin)
		}
	}
	return nil
}

func statusOf(err error) int {
	var in *actions.InputError
	var denied *deniedError
	switch {
	case errors.As(err, &denied):
		return http.StatusForbidden
	case apierrors.IsForbidden(err):
		return http.StatusForbidden
	case apierrors.IsNotFound(err):
		return http.StatusNotFound
	case apierrors.IsConflict(err):
		return http.StatusConflict
	case errors.As(err, &in), errors.Is(err, errUnknownAction):
		return http.StatusBadRequest
	}
	return http.StatusUnprocessableEntity
}

// forbiddenRE reads the API server's words: User "x" cannot patch resource "synctargets" … namespace "y".
var forbiddenRE = regexp.MustCompile(`User "([^"]*)" cannot (\w+) resource "([^"]+)"(?: in API group "[^"]*")?(?: in the namespace "([^"]+)")?`)

// explain says what went wrong in the user's terms: a 403 becomes "you (user X) may not
// patch synctargets in namespace Y".
func (s *Server) explain(err error) string {
	if !apierrors.IsForbidden(err) {
		return err.Error()
	}
	if s.opts.InCluster != nil {
		// The server's own request was refused: not the user's rights at stake.
		return "the converge daemon may not do this: " + err.Error()
	}
	m := forbiddenRE.FindStringSubmatch(err.Error())
	user := s.user()
	if m == nil {
		if user == "" {
			return "you may not do this: " + err.Error()
		}
		return "you (user " + user + ") may not do this: " + err.Error()
	}
	if user == "" {
		user = m[1]
	}
	msg := fmt.Sprintf("you (user %s) may not %s %s", user, m[2], m[3])
	if m[4] != "" {
		msg += " in namespace " + m[4]
	}
	return msg
}

// user is the name the API server knows the UI's identity by (a SelfSubjectReview),
// empty when it cannot say.
func (s *Server) user() string {
	s.whoOnce.Do(func() {
		if s.client == nil {
			return
		}
		review := &authenticationv1.SelfSubjectReview{}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.client.Create(ctx, review); err == nil {
			s.who = review.Status.UserInfo.Username
		}
	})
	return s.who
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func keyOfTarget(st *convergev1.SyncTarget) client.ObjectKey { return client.ObjectKeyFromObject(st) }
