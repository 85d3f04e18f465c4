package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
)

// recorder is a server that answers every request with status and body (made of the
// request by answer when set) and records the credential headers it received.
type recorder struct {
	mu       sync.Mutex
	requests int
	creds    []string
	srv      *httptest.Server
}

func newRecorder(t *testing.T, answer func(r *http.Request) (int, string)) *recorder {
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.requests++
		for _, h := range []string{"Authorization", "Private-Token"} {
			if v := r.Header.Get(h); v != "" {
				rec.creds = append(rec.creds, h+": "+v)
			}
		}
		rec.mu.Unlock()
		status, body := http.StatusOK, "[]"
		if answer != nil {
			status, body = answer(r)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = fmt.Fprint(w, body)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) seen() (int, []string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.requests, append([]string(nil), rec.creds...)
}

// calls makes the calls of a Client that send the token; each returns its error.
func calls(c *Client) map[string]func() error {
	ctx := context.Background()
	return map[string]func() error{
		"OpenPullRequests": func() error { _, _, err := c.OpenPullRequests(ctx); return err },
		"CanWrite": func() error {
			user := "alice"
			if c.kind == GitLab {
				user = "11"
			}
			_, err := c.CanWrite(ctx, user)
			return err
		},
		"UpsertComment": func() error { _, err := c.UpsertComment(ctx, 7, marker, marker+"\nx"); return err },
		"SetStatus": func() error {
			return c.SetStatus(ctx, sha(0xabc), Status{State: StatusSuccess, Context: "converge", TargetURL: "https://ci.example/1"})
		},
	}
}

// dumpHeaders is the request's headers, one "Name: value" a line, as a hostile or
// careless forge echoes them.
func dumpHeaders(r *http.Request) string {
	var lines []string
	for k, vs := range r.Header {
		for _, v := range vs {
			lines = append(lines, k+": "+v)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// No error holds the token, whatever the forge echoes: in its error message, in a
// malformed answer, in a plain-text page.
func TestTokenNeverInErrors(t *testing.T) {
	answers := map[string]func(r *http.Request) (int, string){
		"json message": func(r *http.Request) (int, string) {
			return http.StatusUnauthorized, mustJSON(map[string]string{"message": "bad credentials: " + dumpHeaders(r)})
		},
		"token across the cut": func(r *http.Request) (int, string) {
			return http.StatusBadRequest, strings.Repeat("x", 185) + r.Header.Get("Authorization") + r.Header.Get("Private-Token")
		},
		"plain text": func(r *http.Request) (int, string) {
			return http.StatusInternalServerError, "<html>" + dumpHeaders(r) + "</html>"
		},
		"bitbucket error": func(r *http.Request) (int, string) {
			return http.StatusForbidden, mustJSON(map[string]any{"type": "error", "error": map[string]string{"message": dumpHeaders(r)}})
		},
		"malformed": func(r *http.Request) (int, string) {
			return http.StatusOK, `{"number": "` + dumpHeaders(r) + `"`
		},
		"next page": func(r *http.Request) (int, string) {
			return http.StatusOK, mustJSON(map[string]any{"values": []any{}, "next": "https://" + dumpHeaders(r) + "@elsewhere.example/"})
		},
	}
	for _, kind := range []Kind{GitHub, GitLab, Gitea, Bitbucket} {
		for name, answer := range answers {
			rec := newRecorder(t, answer)
			c, err := New(kind, rec.srv.URL, fixtureOf(kind).repo, testToken, rec.srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			failed := 0
			for call, do := range calls(c) {
				err := do()
				if err != nil {
					failed++
				}
				switch {
				case err == nil: // an answer that fits this call (Gitea's 403 of a permission, a Bitbucket page elsewhere)
				case strings.Contains(err.Error(), testToken[:6]):
					t.Errorf("%s %s %s: the token is in %q", kind, name, call, err)
				case len(err.Error()) > 600:
					t.Errorf("%s %s %s: an error of %d bytes", kind, name, call, len(err.Error()))
				}
			}
			if n, creds := rec.seen(); n == 0 || len(creds) == 0 || failed == 0 {
				t.Fatalf("%s %s: %d requests, credentials %q, %d errors: the test proves nothing", kind, name, n, creds, failed)
			}
		}
	}
}

// An answer outside 2xx is an error naming the status and a short excerpt of the
// forge's message, on one line.
func TestErrorsQuoteTheForgeBriefly(t *testing.T) {
	long := "rate limit exceeded\nfor 1.2.3.4 " + strings.Repeat("very ", 100)
	f := newFake(t, GitHub, testToken, exchange{method: http.MethodGet, path: "/repos/octo/shop/pulls",
		query: fixtureOf(GitHub).pullsQuery(1), status: http.StatusForbidden, answer: mustJSON(map[string]string{"message": long})})
	_, _, err := f.client("octo/shop").OpenPullRequests(context.Background())
	want := "github: GET /repos/octo/shop/pulls: 403 Forbidden: rate limit exceeded for 1.2.3.4 very very"
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want %q…", err, want)
	}
	if msg := strings.TrimPrefix(err.Error(), "github: GET /repos/octo/shop/pulls: 403 Forbidden: "); len(msg) > 200 {
		t.Errorf("a message of %d bytes", len(msg))
	}
}

// A redirect to another host is refused: the call fails and the other host sees nothing,
// neither the token nor a request.
func TestRedirectToAnotherHostRefused(t *testing.T) {
	for _, kind := range []Kind{GitHub, GitLab, Gitea, Bitbucket} {
		t.Run(string(kind), func(t *testing.T) {
			other := newRecorder(t, nil)
			forge := newRecorder(t, func(r *http.Request) (int, string) {
				return http.StatusTemporaryRedirect, ""
			})
			hc := forge.srv.Client()
			moved := httptest.NewServer(http.RedirectHandler(other.srv.URL+"/moved", http.StatusFound))
			t.Cleanup(moved.Close)
			c, err := New(kind, moved.URL, fixtureOf(kind).repo, testToken, hc)
			if err != nil {
				t.Fatal(err)
			}
			for call, do := range calls(c) {
				if kind == Bitbucket && call == "CanWrite" {
					continue
				}
				if err := do(); err == nil || !strings.Contains(err.Error(), "refusing a redirect") {
					t.Errorf("%s: got %v, want a refused redirect", call, err)
				}
			}
			if n, creds := other.seen(); n != 0 || len(creds) != 0 {
				t.Errorf("the other host saw %d requests, credentials %q", n, creds)
			}
			if hc.CheckRedirect != nil {
				t.Error("New changed the caller's HTTP client")
			}
		})
	}
}

// A redirect on the forge's own host is followed without the token.
func TestRedirectOnTheSameHostDropsTheToken(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(string(fx.kind), func(t *testing.T) {
			var mu sync.Mutex
			var creds []string
			mux := http.NewServeMux()
			mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/moved?"+r.URL.RawQuery, http.StatusMovedPermanently)
			})
			mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				creds = append(creds, r.Header.Get("Authorization")+r.Header.Get("Private-Token"))
				mu.Unlock()
				_, _ = fmt.Fprint(w, fx.page("/moved", fx.pullsQuery, 1, nil, true))
			})
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			c, err := New(fx.kind, srv.URL, fx.repo, testToken, srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.OpenPullRequests(context.Background()); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(creds) != 1 || creds[0] != "" {
				t.Errorf("the redirected request carried %q", creds)
			}
		})
	}
}

// Bitbucket's "next" link is followed only on the base's scheme, host and port.
func TestBitbucketNextElsewhereRefused(t *testing.T) {
	other := newRecorder(t, nil)
	otherURL, _ := url.Parse(other.srv.URL)
	for _, tc := range []struct{ name, next string }{
		{"another host", other.srv.URL + "/2.0/repositories/ws/shop/pullrequests?page=2"},
		{"another scheme", "https://@HOST@/2.0/repositories/ws/shop/pullrequests?page=2"},
		{"credentials", "http://user:pw@@HOST@/2.0/repositories/ws/shop/pullrequests?page=2"},
		{"relative", "/2.0/repositories/ws/shop/pullrequests?page=2"},
		{"not a URL", "http://%zz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := fixtureOf(Bitbucket)
			f := newFake(t, Bitbucket, testToken)
			host := strings.TrimPrefix(f.srv.URL, "http://")
			f.add(exchange{method: http.MethodGet, path: fx.pullsPath, query: fx.pullsQuery(1),
				answer: mustJSON(map[string]any{"values": fx.pulls(1, 50), "next": strings.ReplaceAll(tc.next, "@HOST@", host)})})
			_, _, err := f.client(fx.repo).OpenPullRequests(context.Background())
			if err == nil || !strings.Contains(err.Error(), "refusing the next page") {
				t.Fatalf("got %v, want the next page refused", err)
			}
		})
	}
	if n, creds := other.seen(); n != 0 {
		t.Errorf("%s saw %d requests, credentials %q", otherURL.Host, n, creds)
	}
}

// Every answer is read up to the cap, and no further.
func TestAnswersAreCapped(t *testing.T) {
	setVar(t, &maxBody, 1024)
	fx := fixtureOf(GitHub)
	f := newFake(t, GitHub, testToken, exchange{method: http.MethodGet, path: fx.pullsPath, query: fx.pullsQuery(1),
		answer: "[" + strings.Repeat(" ", 2048) + "]"})
	_, _, err := f.client(fx.repo).OpenPullRequests(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cap of 1024 bytes") {
		t.Fatalf("got %v, want the cap", err)
	}
}

// A cancelled context ends a call waiting for the forge, and stops one before it asks.
func TestContextCancellation(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	c, err := New(GitHub, srv.URL, "octo/shop", testToken, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	if _, _, err := c.OpenPullRequests(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}

	f := newFake(t, GitHub, testToken) // asked nothing
	if _, err := f.client("octo/shop").CanWrite(ctx, "alice"); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// New refuses what it cannot use safely, and never quotes the token.
func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name              string
		kind              Kind
		base, repo, token string
		wantErr           string
	}{
		{"unknown forge", "svn", "", "o/r", "", "unknown forge"},
		{"ftp", GitHub, "ftp://forge.example", "o/r", "", "http:// or https://"},
		{"no host", GitHub, "https:///api", "o/r", "", "no host"},
		{"credentials in the address", GitLab, "https://user:pw@gitlab.example", "g/p", "", "credentials"},
		{"a query", Gitea, "https://gitea.example/?x=1", "o/r", "", "query"},
		{"a fragment", Gitea, "https://gitea.example/#x", "o/r", "", "fragment"},
		{"one segment", GitHub, "", "octo", "", "owner/repo"},
		{"three segments", GitHub, "", "a/b/c", "", "owner/repo"},
		{"gitlab one segment", GitLab, "", "project", "", "group/project"},
		{"dot dot", GitLab, "", "group/../admin", "", "not a name"},
		{"a query in the repository", Bitbucket, "", "ws/r?x=1", "", "not a name"},
		{"an escape in the repository", Gitea, "", "o/r%2F..", "", "not a name"},
		{"an empty segment", GitLab, "", "group//p", "", "not a name"},
		{"a token with a newline", GitHub, "", "o/r", testToken + "\nX-Evil: 1", "control character"},
		{"a token with a space", GitHub, "", "o/r", "Bearer " + testToken, "space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.kind, tc.base, tc.repo, tc.token, nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), testToken) || strings.Contains(err.Error(), "pw") {
				t.Errorf("the error quotes a secret: %v", err)
			}
		})
	}
	for _, kind := range []Kind{GitHub, GitLab, Gitea, Bitbucket} {
		c, err := New(kind, "", fixtureOf(kind).repo, testToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.root != PublicBase(kind) || c.hc.Timeout != defaultTimeout {
			t.Errorf("%s: root %q, timeout %v", kind, c.root, c.hc.Timeout)
		}
		if s := fmt.Sprintf("%+v %#v", c, c); strings.Contains(s, testToken) {
			t.Errorf("%s: printing the client shows the token", kind)
		}
	}
	if PublicBase("svn") != "" {
		t.Error("a public base for an unknown forge")
	}
}
