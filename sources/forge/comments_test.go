package forge

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

const marker = "<!-- converge-preview shop/previews -->"

// UpsertComment finds converge's comment by its marker and its author, and creates,
// edits or leaves it, on every forge.
func TestUpsertComment(t *testing.T) {
	const (
		old  = marker + "\nPreview of abc1234: deploying"
		body = marker + "\nPreview of def5678: ready at https://pr-7.shop.example"
	)
	for _, fx := range fixtures {
		others := func(first, n int) []map[string]any {
			var out []map[string]any
			for i := range n {
				out = append(out, fx.comment(first+i, fx.other, "looks good"))
			}
			return out
		}
		for _, tc := range []struct {
			name   string
			script []exchange
			want   string
		}{{
			name: "created when none",
			script: []exchange{fx.self(), fx.commentsPage(1, []map[string]any{
				fx.comment(101, fx.other, "LGTM"),
				fx.comment(102, fx.me, "an unrelated comment of the same user"),
			}, true), {
				method: http.MethodPost, path: fx.commentsPath, body: fx.writeBody(body),
				status: http.StatusCreated, answer: mustJSON(fx.comment(555, fx.me, body)),
			}},
			want: "555",
		}, {
			name: "edited when its body differs",
			script: []exchange{fx.self(), fx.commentsPage(1, []map[string]any{
				fx.comment(101, fx.other, "LGTM"),
				fx.comment(103, fx.me, old),
				fx.comment(104, fx.me, old+" (a second one, left alone)"),
			}, true), {
				method: fx.editMethod, path: fx.editPath(103), body: fx.writeBody(body),
				answer: mustJSON(fx.comment(103, fx.me, body)),
			}},
			want: "103",
		}, {
			name: "left alone when equal",
			script: []exchange{fx.self(), fx.commentsPage(1, []map[string]any{
				fx.comment(103, fx.me, strings.ReplaceAll(body, "\n", "\r\n")+"\n"),
			}, true)},
			want: "103",
		}, {
			name: "another user's comment with the marker ignored",
			script: []exchange{fx.self(), fx.commentsPage(1, []map[string]any{
				fx.comment(106, fx.other, old),
			}, true), {
				method: http.MethodPost, path: fx.commentsPath, body: fx.writeBody(body),
				status: http.StatusCreated, answer: mustJSON(fx.comment(556, fx.me, body)),
			}},
			want: "556",
		}, {
			name: "found on the second page",
			script: []exchange{fx.self(),
				fx.commentsPage(1, others(1000, fx.commentsSize), false),
				fx.commentsPage(2, []map[string]any{fx.comment(2000, fx.other, old), fx.comment(2001, fx.me, old)}, true), {
					method: fx.editMethod, path: fx.editPath(2001), body: fx.writeBody(body),
					answer: mustJSON(fx.comment(2001, fx.me, body)),
				}},
			want: "2001",
		}, {
			name: "a forge that does not page",
			script: []exchange{fx.self(),
				fx.commentsPage(1, others(1000, fx.commentsSize), false),
				fx.commentsPage(2, others(1000, fx.commentsSize), false), {
					method: http.MethodPost, path: fx.commentsPath, body: fx.writeBody(body),
					status: http.StatusCreated, answer: mustJSON(fx.comment(557, fx.me, body)),
				}},
			want: "557",
		}} {
			t.Run(string(fx.kind)+"/"+tc.name, func(t *testing.T) {
				f := newFake(t, fx.kind, testToken, tc.script...)
				got, err := f.client(fx.repo).UpsertComment(context.Background(), 7, marker, body)
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Errorf("comment %q, want %q", got, tc.want)
				}
			})
		}
	}
}

// The token's user is asked once per client.
func TestUpsertCommentAsksWhoOnce(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(string(fx.kind), func(t *testing.T) {
			body := marker + "\nready"
			page := fx.commentsPage(1, []map[string]any{fx.comment(9, fx.me, body)}, true)
			f := newFake(t, fx.kind, testToken, fx.self(), page, page)
			c := f.client(fx.repo)
			for range 2 {
				if id, err := c.UpsertComment(context.Background(), 7, marker, body); err != nil || id != "9" {
					t.Fatalf("got %q, %v", id, err)
				}
			}
		})
	}
}

// Comments beyond the page limit, none of them converge's, are an error: no new
// comment.
func TestUpsertCommentPageLimit(t *testing.T) {
	setVar(t, &maxPages, 2)
	for _, fx := range fixtures {
		t.Run(string(fx.kind), func(t *testing.T) {
			page := func(p int) exchange {
				var items []map[string]any
				for i := range fx.commentsSize {
					items = append(items, fx.comment(p*1000+i, fx.other, "+1"))
				}
				return fx.commentsPage(p, items, false)
			}
			f := newFake(t, fx.kind, testToken, fx.self(), page(1), page(2))
			_, err := f.client(fx.repo).UpsertComment(context.Background(), 7, marker, marker+"\nx")
			if err == nil || !strings.Contains(err.Error(), "more than 2 pages of comments") {
				t.Fatalf("got %v, want the page limit", err)
			}
		})
	}
}

// What cannot make one right comment is refused before any request.
func TestUpsertCommentRefuses(t *testing.T) {
	for _, tc := range []struct {
		name         string
		token        string
		number       int
		marker, body string
		wantErr      string
	}{
		{"no number", testToken, 0, marker, marker + "\nx", "positive number"},
		{"a negative number", testToken, -3, marker, marker + "\nx", "positive number"},
		{"no marker", testToken, 7, "", "x", "marker"},
		{"a body without its marker", testToken, 7, marker, "x", "marker"},
		{"no token", "", 7, marker, marker + "\nx", "needs a token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, GitHub, tc.token)
			_, err := f.client("octo/shop").UpsertComment(context.Background(), tc.number, tc.marker, tc.body)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}
