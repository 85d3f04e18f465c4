package remote

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/converge-gitops/converge/internal/category"
)

// The media types a Kubernetes API server answers with (CBOR clients are not enabled).
const (
	jsonType     = "application/json"
	protobufType = "application/vnd.kubernetes.protobuf"
)

// maxStatusBytes bounds the error answer read to see whether it is a Status.
const maxStatusBytes = 1 << 20

// NotAPIServerError is an answer of a remote cluster's server that a Kubernetes API server
// does not give: a redirect, or a body that is no API object. The body is never quoted: a
// kubeconfig may point at any server the daemon reaches (an internal web service, a
// metadata service), and a tenant would read its answers in the SyncTarget's status.
type NotAPIServerError struct {
	// Host is the server's host[:port].
	Host string
	// Code is the HTTP status code of the answer.
	Code int
	// ContentType is the media type of the answer, "" when it has none.
	ContentType string
	// Redirect is an answer that sends the request elsewhere.
	Redirect bool
}

// FailureCategory says a server that does not answer as an API server is not a
// revision's fault: retried.
func (e *NotAPIServerError) FailureCategory() (category.Category, string) { return category.Retry, "" }

func (e *NotAPIServerError) Error() string {
	if e.Redirect {
		return fmt.Sprintf("the server at %s answered with a redirect (HTTP %d), which is not followed: "+
			"a Kubernetes API server does not redirect, and the request's credentials would go elsewhere", e.Host, e.Code)
	}
	ct := e.ContentType
	if ct == "" {
		ct = "no content type"
	}
	return fmt.Sprintf("the server at %s did not answer as a Kubernetes API server (HTTP %d, %s)", e.Host, e.Code, ct)
}

// apiAnswers is the RoundTripper below client-go's (authentication, impersonation) of a
// remote cluster: it passes on only what a Kubernetes API server answers.
//
//   - A redirect is an error: client-go's HTTP client would follow it, and its
//     authentication RoundTripper would send the kubeconfig's token to the new location,
//     whatever its host or scheme.
//   - An error answer is passed on if its body is a Status (as an API server's are), and
//     is an error otherwise: client-go would quote the body of a text answer, or of one
//     without a content type, in its error.
//   - A success answer of another media type than JSON or protobuf is an error; a JSON one
//     is read through a kindCheck, for client-go's decoders quote an object without a kind.
type apiAnswers struct {
	next http.RoundTripper
	// prefix is the path of the server URL, without its trailing slash.
	prefix string
}

// WrappedRoundTripper lets client-go reach the *http.Transport (idle connections).
func (a *apiAnswers) WrappedRoundTripper() http.RoundTripper { return a.next }

// RoundTrip implements http.RoundTripper.
func (a *apiAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(req)
	if err != nil || resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, err
	}
	media := mediaType(resp.Header.Get("Content-Type"))
	notAPI := &NotAPIServerError{Host: req.URL.Host, Code: resp.StatusCode, ContentType: media}
	switch {
	case isRedirect(resp.StatusCode):
		notAPI.Redirect = true
		return nil, discard(resp, notAPI)
	case resp.StatusCode < http.StatusOK || resp.StatusCode > http.StatusPartialContent:
		return statusAnswer(req, resp, media, notAPI)
	case media == protobufType || resp.ContentLength == 0:
		return resp, nil
	case media == jsonType || media == "": // client-go reads an answer without a type as JSON
		if !a.untyped(req) {
			resp.Body = &kindCheck{body: resp.Body, watch: isWatch(req), notAPI: notAPI}
		}
		return resp, nil
	}
	return nil, discard(resp, notAPI)
}

// untyped reports whether req asks for a document that is no API object, which client-go
// reads with encoding/json into a type of its own (no error of it quotes the answer).
func (a *apiAnswers) untyped(req *http.Request) bool {
	path := strings.TrimPrefix(req.URL.Path, a.prefix)
	return path == "/version" || strings.HasPrefix(path, "/openapi/")
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

func isWatch(req *http.Request) bool {
	watch, _ := strconv.ParseBool(req.URL.Query().Get("watch"))
	return watch
}

// discard closes the body of an answer that is not passed on.
func discard(resp *http.Response, err error) error {
	_ = resp.Body.Close()
	return err
}

// plainMediaType is a media type that may be named in an error.
var plainMediaType = regexp.MustCompile(`^[a-z0-9][a-z0-9.+-]{0,40}/[a-z0-9][a-z0-9.+-]{0,60}$`)

// mediaType is the media type of a Content-Type header, without its parameters: "" when
// there is none, a fixed word when it is not a plain media type.
func mediaType(contentType string) string {
	if contentType == "" {
		return ""
	}
	media, _, err := mime.ParseMediaType(contentType)
	if err != nil || !plainMediaType.MatchString(media) {
		return "an unreadable content type"
	}
	return media
}

// statusAnswer passes on an error answer whose body is a Status, and makes any other a
// NotAPIServerError.
func statusAnswer(req *http.Request, resp *http.Response, media string, notAPI *NotAPIServerError) (*http.Response, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes+1))
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the HTTP %d answer of %s: %w", resp.StatusCode, req.URL.Host, err)
	}
	if len(body) > maxStatusBytes || !isStatus(body, media) {
		return nil, notAPI
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// statusDecoder decodes a Status, as client-go looks for one in an error answer.
var statusDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}()

// isStatus reports whether body, of media type media, is a Status.
func isStatus(body []byte, media string) bool {
	if media != jsonType && media != protobufType {
		return false
	}
	obj, _, err := statusDecoder.Decode(body, &schema.GroupVersionKind{Version: "v1"}, nil)
	_, ok := obj.(*metav1.Status)
	return err == nil && ok
}
