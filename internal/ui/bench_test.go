package ui

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkOverview1000 renders the overview of 1000 SyncTargets from memory and
// reports the page's size, as sent to a browser (gzip) and uncompressed.
func BenchmarkOverview1000(b *testing.B) {
	s := NewWithStore(Options{Now: func() time.Time { return fixedNow }}, NewMemoryStore(fakeTargets(1000), nil), nil)
	var plain, gzipped int
	for b.Loop() {
		plain = overviewBytes(b, s, "")
		gzipped = overviewBytes(b, s, "gzip")
	}
	b.ReportMetric(float64(plain), "bytes/page")
	b.ReportMetric(float64(gzipped), "gzip-bytes/page")
}

func overviewBytes(b *testing.B, s *Server, encoding string) int {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Accept-Encoding", encoding)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.Len()
}
