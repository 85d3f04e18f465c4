package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// SOPS ciphertext outside a SOPS file. A file that holds values in SOPS' encrypted form but
// is not a SOPS file decryptSOPS decrypts — its sops metadata, or their mac, was removed
// (by hand, a merge or a tool), or it is in a SOPS format not supported here (INI) — would
// otherwise pass on as it is, and a Secret be applied holding "ENC[AES256_GCM,…]" as its
// value. Such a file fails the render with ErrCiphertext instead, naming the key (or the
// line) of the first such value, never the value. This is the check of every file read for
// the render, whatever reads it: plain manifests, kustomizations (so a generator's
// literals), and the files and envs of secret and ConfigMap generators.

// sopsCiphertext matches a value in SOPS' encrypted form.
var sopsCiphertext = regexp.MustCompile(`ENC\[AES256_GCM,data:[^,\]\s]*,iv:[^,\]\s]*,tag:[^,\]\s]*,type:[^,\]\s]*\]`)

// sopsCiphertextPrefix is searched first: most files do not hold it.
var sopsCiphertextPrefix = []byte("ENC[AES256_GCM,")

// refuseCiphertext fails with ErrCiphertext when b, the content of the file name that is
// not a SOPS file, holds a SOPS-encrypted value.
func refuseCiphertext(name string, b []byte, maxDepth int) error {
	if !bytes.Contains(b, sopsCiphertextPrefix) || !sopsCiphertext.Match(b) {
		return nil
	}
	return classErr(ErrCiphertext, "%s holds a SOPS-encrypted value, but the file is not a SOPS file that can be decrypted "+
		"(its sops metadata or their mac is missing, or its format is not YAML, JSON, dotenv or binary): it is not applied as ciphertext",
		locateCiphertext(name, b, maxDepth))
}

// locateCiphertext names where the first SOPS-encrypted value of b is: by document and key
// path in YAML and JSON (and any other file that parses as YAML), by line and key in dotenv
// and INI files, by line only otherwise.
func locateCiphertext(name string, b []byte, maxDepth int) string {
	base := strings.ToLower(path.Base(name))
	if !strings.HasSuffix(base, ".env") && !strings.HasSuffix(base, ".ini") {
		if where, ok := locateInYAML(b, maxDepth); ok {
			return where
		}
	}
	return locateInLines(b)
}

// locateInYAML finds the first value of a mapping or sequence that holds SOPS ciphertext;
// ok is false when b is not YAML or no such value holds it (it may be in a key, a comment,
// or a document that is one string).
func locateInYAML(b []byte, maxDepth int) (where string, ok bool) {
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", false
		}
		docs = append(docs, &n)
	}
	for i, d := range docs {
		keyPath, line, found := findCiphertext(d, "", 0, maxDepth)
		if !found {
			continue
		}
		if keyPath == "" { // a document that is one string, such as a dotenv file read as YAML
			return "", false
		}
		where = fmt.Sprintf("%s (line %d)", keyPath, line)
		if len(docs) > 1 {
			where = fmt.Sprintf("document %d, %s", i+1, where)
		}
		return where, true
	}
	return "", false
}

// findCiphertext walks n, found at keyPath, for the first scalar holding SOPS ciphertext.
// Aliases are not followed (their anchor is walked where it stands).
func findCiphertext(n *yaml.Node, keyPath string, depth, maxDepth int) (string, int, bool) {
	if depth > maxDepth {
		return "", 0, false
	}
	switch n.Kind {
	case yaml.ScalarNode:
		return keyPath, n.Line, sopsCiphertext.MatchString(n.Value)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if n.Content[i].Kind != yaml.ScalarNode {
				key = "?"
			}
			if keyPath != "" {
				key = keyPath + "." + key
			}
			if p, line, ok := findCiphertext(n.Content[i+1], key, depth+1, maxDepth); ok {
				return p, line, true
			}
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for i, c := range n.Content {
			p := keyPath
			if n.Kind == yaml.SequenceNode {
				p += "[" + strconv.Itoa(i) + "]"
			}
			if p, line, ok := findCiphertext(c, p, depth+1, maxDepth); ok {
				return p, line, true
			}
		}
	}
	return "", 0, false
}

// iniKey is what may name a dotenv or INI entry in an error: the text before its = when it
// looks like a key, never anything after it.
var iniKey = regexp.MustCompile(`^[A-Za-z0-9_.\-]+$`)

// locateInLines names the line of the first SOPS-encrypted value, with its key when the
// line is KEY=VALUE (or "key = value" in an INI [section], named section.key).
func locateInLines(b []byte) string {
	section := ""
	for i, line := range strings.Split(string(b), "\n") {
		loc := sopsCiphertext.FindStringIndex(line)
		if loc == nil {
			if t := strings.TrimSpace(line); strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
				section = strings.TrimSpace(t[1 : len(t)-1])
			}
			continue
		}
		where := "line " + strconv.Itoa(i+1)
		before, _, isPair := strings.Cut(line[:loc[0]], "=")
		key := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(before), "export "))
		if !isPair || !iniKey.MatchString(key) {
			return where
		}
		if section != "" && iniKey.MatchString(section) {
			key = section + "." + key
		}
		return key + " (" + where + ")"
	}
	return "a value" // only across lines: not found line by line
}
