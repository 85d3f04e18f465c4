// Package forge is the REST client of the forges converge reads pull requests from,
// comments on and sets commit statuses on: GitHub (and GitHub Enterprise), GitLab, Gitea
// and Forgejo, Bitbucket Cloud. A Client talks to one repository of one forge; New checks
// the API base (an http or https URL, no credentials, query nor fragment), the repository
// path and the token.
//
//   - OpenPullRequests lists the open pull (merge) requests, page by page, up to
//     MaxPullRequests (and 50 pages): more are reported as truncated. GitHub, Gitea and
//     GitLab are asked by page number (100 a page, Gitea 50: a Gitea whose
//     MAX_RESPONSE_ITEMS is set below 50 answers shorter pages, read as the last),
//     Bitbucket through the "next" link of each page.
//   - CanWrite asks the forge whether a user may push to the repository: GitHub's and
//     Gitea's collaborator permission, GitLab's membership access level (Developer or
//     more). Bitbucket Cloud has no call telling another user's permission on a
//     repository to a repository or workspace token: there CanWrite always says false,
//     and a caller trusts pull requests by other means (their source repository).
//   - UpsertComment keeps one comment of converge on a pull request, found by a marker
//     its body holds and by its author, the token's own user (asked once per Client):
//     edited in place when its body changed, left alone when not, created when missing.
//     A comment holding the marker written by anybody else is never touched.
//   - SetStatus sets a commit status of a context on a commit (its full hash): GitHub's
//     and Gitea's statuses, GitLab's commit statuses, Bitbucket's build statuses. The
//     description is cut to 140 characters; a target URL is sent only when it is an
//     http(s) URL (Bitbucket requires one: without it, the repository's page on
//     bitbucket.org); a context longer than 40 characters is shortened, with a hash of
//     it, into Bitbucket's key. GitLab's refusal of a pending status over a pending one
//     counts as the status set.
//
// # What is sent where
//
// Every request goes to the API base's origin (scheme, host and port) and carries the
// token, when there is one, in the forge's own header: GitHub and Bitbucket
// "Authorization: Bearer", Gitea "Authorization: token", GitLab "PRIVATE-TOKEN". A
// redirect to another origin is refused (the call fails, nothing is sent there); a
// redirect on the same origin is followed without the token. Bitbucket's "next" link is
// followed only on the base's origin. The paths are the base's path followed by the API
// path: GitHub's base is the API root (https://api.github.com, https://host/api/v3 for
// Enterprise); GitLab's and Gitea's base is the server's root (/api/v4/, /api/v1/ are
// appended); Bitbucket's is https://api.bitbucket.org (/2.0/ appended). GitLab's project
// is its full path escaped as one segment (group%2Fproject).
//
// # What comes back
//
// Answers are untrusted. Each body is read up to 8 MiB, beyond which the call fails; JSON
// of a wrong shape or type fails the call as a malformed answer, it never panics. An
// answer outside 2xx is an error naming the method, the path, the status and at most
// 200 bytes of the forge's message on one line. No error ever holds the token: it is
// removed from every error, the forge's echoes included.
//
// A pull request without a positive number, or without a head commit given as 7 to 64
// hexadecimal digits, or whose author, author ID or branch names are longer than 1 KiB,
// is skipped, not an error. Its title is cut to 1 KiB (on a character boundary); its web
// URL is kept only when it is an http(s) URL of at most 1 KiB; labels longer than 1 KiB
// are dropped, 100 at most are kept, sorted and without duplicates. A pull request seen
// twice while paging counts once. Everything else is returned as the forge gave it: data
// for the caller to quote, never to evaluate (titles and branches may hold template
// syntax, shell characters or newlines). UpdatedAt is zero when the forge's time does not
// parse.
package forge
