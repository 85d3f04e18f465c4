package ui

import (
	"bytes"
	"compress/gzip"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/internal/tree"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pages are the parsed templates; each page and fragment is a named template.
type pages struct {
	t *template.Template
}

var funcs = template.FuncMap{
	"lower":       strings.ToLower,
	"healthClass": healthClass,
	"nsLabel":     nsLabel,
	"short":       shorten,
	"itoa":        strconv.Itoa,
	// owns says whether objects of the kind own objects the page can show (tree.HasOwned).
	"owns": func(apiVersion, kind string) bool {
		gv, _ := schema.ParseGroupVersion(apiVersion)
		return tree.HasOwned(gv.WithKind(kind))
	},
}

// healthClass is the class of a badge of status s.
func healthClass(s health.Status) string {
	switch s {
	case health.Current:
		return "ok"
	case health.Failed, health.NotFound:
		return "bad"
	case health.InProgress, health.Terminating:
		return "busy"
	}
	return "unknown"
}

// nsLabel names a namespace, or says an object has none.
func nsLabel(ns string) string {
	if ns == "" {
		return "(cluster-scoped)"
	}
	return ns
}

func mustParsePages() *pages {
	t := template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
	return &pages{t: t}
}

// render executes template name into a buffer first, so that a failing template
// sends an error instead of half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, name string, data any) {
	s.renderStatus(w, r, http.StatusOK, name, data)
}

func (s *Server) renderStatus(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	var buf bytes.Buffer
	if err := s.pages.t.ExecuteTemplate(&buf, name, data); err != nil {
		http.Error(w, "rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	writeMaybeGzip(w, r, code, buf.Bytes())
}

// gzipMin is the size from which a response is compressed.
const gzipMin = 4096

// writeMaybeGzip writes body, gzipped when it is big and the client takes gzip.
func writeMaybeGzip(w http.ResponseWriter, r *http.Request, code int, body []byte) {
	w.Header().Add("Vary", "Accept-Encoding")
	if len(body) < gzipMin || !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.WriteHeader(code)
		_, _ = w.Write(body)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	w.WriteHeader(code)
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return
	}
	_, _ = zw.Write(body)
	_ = zw.Close()
}

// staticHandler serves the embedded script and style sheet.
func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil { // the embed directive guarantees the directory
		return http.NotFoundHandler()
	}
	return http.FileServerFS(sub)
}
