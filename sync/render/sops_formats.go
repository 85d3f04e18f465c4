package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// sopsMetadata is the part of a file's "sops" metadata that decryption needs.
type sopsMetadata struct {
	Age []sopsAgeKey `yaml:"age" json:"age"`
	PGP []sopsPGPKey `yaml:"pgp" json:"pgp"`
	KMS []struct {
		ARN string `yaml:"arn" json:"arn"`
	} `yaml:"kms" json:"kms"`
	GCPKMS []struct {
		ResourceID string `yaml:"resource_id" json:"resource_id"`
	} `yaml:"gcp_kms" json:"gcp_kms"`
	AzureKV []struct {
		VaultURL string `yaml:"vault_url" json:"vault_url"`
		Name     string `yaml:"name" json:"name"`
	} `yaml:"azure_kv" json:"azure_kv"`
	Vault []struct {
		Address string `yaml:"vault_address" json:"vault_address"`
		Key     string `yaml:"key_name" json:"key_name"`
	} `yaml:"hc_vault" json:"hc_vault"`
	KeyGroups               []any  `yaml:"key_groups" json:"key_groups"`
	LastModified            string `yaml:"lastmodified" json:"lastmodified"`
	MAC                     string `yaml:"mac" json:"mac"`
	UnencryptedSuffix       string `yaml:"unencrypted_suffix" json:"unencrypted_suffix"`
	EncryptedSuffix         string `yaml:"encrypted_suffix" json:"encrypted_suffix"`
	UnencryptedRegex        string `yaml:"unencrypted_regex" json:"unencrypted_regex"`
	EncryptedRegex          string `yaml:"encrypted_regex" json:"encrypted_regex"`
	UnencryptedCommentRegex string `yaml:"unencrypted_comment_regex" json:"unencrypted_comment_regex"`
	EncryptedCommentRegex   string `yaml:"encrypted_comment_regex" json:"encrypted_comment_regex"`
	MACOnlyEncrypted        bool   `yaml:"mac_only_encrypted" json:"mac_only_encrypted"`
}

type sopsAgeKey struct {
	Recipient string `yaml:"recipient" json:"recipient"`
	Enc       string `yaml:"enc" json:"enc"`
}

type sopsPGPKey struct {
	Fingerprint string `yaml:"fp" json:"fp"`
	Enc         string `yaml:"enc" json:"enc"`
}

// sopsFormat is one of the file formats of SOPS.
type sopsFormat int

const (
	formatYAML sopsFormat = iota
	formatJSON
	formatDotenv
	formatBinary // any other file: a JSON {"data": …, "sops": …} wrapping its content
)

// sopsFormatOf picks the format from the file name, as sops does.
func sopsFormatOf(name string) sopsFormat {
	l := strings.ToLower(name)
	switch {
	case strings.HasSuffix(l, ".yaml"), strings.HasSuffix(l, ".yml"):
		return formatYAML
	case strings.HasSuffix(l, ".json"):
		return formatJSON
	case strings.HasSuffix(l, ".env"):
		return formatDotenv
	}
	return formatBinary
}

// sopsDoc is a parsed SOPS file: its documents (one but for multi-document YAML) and metadata.
type sopsDoc struct {
	format sopsFormat
	docs   []*sopsMap
	meta   *sopsMetadata
}

// parseSOPS parses b as a SOPS file of format f. ok is false, with no error, when b is not
// one (no top-level sops metadata holding mac and lastmodified): such files pass untouched.
func parseSOPS(f sopsFormat, b []byte, maxDepth int) (doc *sopsDoc, ok bool, err error) {
	switch f {
	case formatYAML:
		return parseSOPSYAML(b, maxDepth)
	case formatDotenv:
		return parseSOPSDotenv(b)
	}
	return parseSOPSJSON(f, b, maxDepth)
}

func isSOPSMeta(m *sopsMetadata) bool { return m.MAC != "" && m.LastModified != "" }

func parseSOPSYAML(b []byte, maxDepth int) (*sopsDoc, bool, error) {
	doc := &sopsDoc{format: formatYAML}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for i := 0; ; i++ {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, false, nil // not YAML: not ours to judge
		}
		if len(n.Content) == 0 {
			continue
		}
		top := n.Content[0]
		if top.Kind != yaml.MappingNode {
			return nil, false, nil
		}
		if i == 0 {
			meta, found := yamlSOPSMeta(top)
			if !found {
				return nil, false, nil
			}
			doc.meta = meta
		}
		v, err := yamlTree(top, 1, maxDepth)
		if err != nil {
			return nil, true, err
		}
		doc.docs = append(doc.docs, v.(*sopsMap).without("sops"))
	}
	return doc, doc.meta != nil, nil
}

// yamlSOPSMeta decodes the sops metadata of a top-level mapping, if it has any.
func yamlSOPSMeta(top *yaml.Node) (*sopsMetadata, bool) {
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "sops" || top.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		m := &sopsMetadata{}
		if err := top.Content[i+1].Decode(m); err != nil || !isSOPSMeta(m) {
			return nil, false
		}
		return m, true
	}
	return nil, false
}

// yamlTree converts a YAML node into the tree sops walks; scalars decode as sops' YAML
// store decodes them, so that unencrypted leaves enter the MAC alike.
func yamlTree(n *yaml.Node, depth, maxDepth int) (any, error) {
	if depth > maxDepth {
		return nil, classErr(ErrLimitExceeded, "nests deeper than %d levels", maxDepth)
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := &sopsMap{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := yamlTree(n.Content[i+1], depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			m.keys = append(m.keys, n.Content[i].Value)
			m.vals = append(m.vals, v)
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := yamlTree(c, depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return v, nil
	}
	// sops writes its files from a tree: an alias in one was not written by sops.
	return nil, fmt.Errorf("line %d: YAML aliases are not supported in SOPS-encrypted files", n.Line)
}

// emitYAML writes the decrypted documents as a YAML stream.
func emitYAML(docs []*sopsMap) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	for _, d := range docs {
		n, err := yamlNode(d)
		if err != nil {
			return nil, err
		}
		if err := enc.Encode(n); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func yamlNode(v any) (*yaml.Node, error) {
	switch x := v.(type) {
	case *sopsMap:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for i, k := range x.keys {
			vn, err := yamlNode(x.vals[i])
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, vn)
		}
		return n, nil
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, e := range x {
			en, err := yamlNode(e)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, en)
		}
		return n, nil
	case []byte:
		v = string(x)
	}
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		return nil, errors.New("a decrypted value cannot be written as YAML")
	}
	return n, nil
}

func parseSOPSJSON(f sopsFormat, b []byte, maxDepth int) (*sopsDoc, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := jsonTree(dec, 1, maxDepth)
	if err != nil {
		return nil, false, nil // not JSON: not ours to judge
	}
	top, isMap := v.(*sopsMap)
	if !isMap {
		return nil, false, nil
	}
	raw, found := top.get("sops")
	if !found {
		return nil, false, nil
	}
	js, err := json.Marshal(plainValue(raw))
	if err != nil {
		return nil, false, nil
	}
	meta := &sopsMetadata{}
	if err := json.Unmarshal(js, meta); err != nil || !isSOPSMeta(meta) {
		return nil, false, nil
	}
	doc := &sopsDoc{format: f, docs: []*sopsMap{top.without("sops")}, meta: meta}
	if _, hasData := doc.docs[0].get("data"); f == formatBinary && !hasData {
		return nil, true, errors.New("a SOPS-encrypted binary file must hold a data key")
	}
	return doc, true, nil
}

// jsonTree reads one JSON value keeping key order; numbers become int or float64 as in
// sops' JSON store.
func jsonTree(dec *json.Decoder, depth, maxDepth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nests deeper than %d levels", maxDepth)
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		switch x {
		case '{':
			m := &sopsMap{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := jsonTree(dec, depth+1, maxDepth)
				if err != nil {
					return nil, err
				}
				m.keys = append(m.keys, fmt.Sprint(kt))
				m.vals = append(m.vals, v)
			}
			_, err := dec.Token()
			return m, err
		case '[':
			l := []any{}
			for dec.More() {
				v, err := jsonTree(dec, depth+1, maxDepth)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := dec.Token()
			return l, err
		}
		return nil, errors.New("unexpected delimiter")
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i), nil
		}
		return x.Float64()
	}
	return t, nil
}

// plainValue turns a tree into maps and slices, for metadata decoding and JSON output of
// values whose order does not matter.
func plainValue(v any) any {
	switch x := v.(type) {
	case *sopsMap:
		m := make(map[string]any, len(x.keys))
		for i, k := range x.keys {
			m[k] = plainValue(x.vals[i])
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = plainValue(e)
		}
		return l
	case []byte:
		return string(x)
	}
	return v
}

// emitJSON writes a decrypted document as JSON, keys in file order.
func emitJSON(w *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case *sopsMap:
		w.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				w.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			w.Write(kb)
			w.WriteByte(':')
			if err := emitJSON(w, x.vals[i]); err != nil {
				return err
			}
		}
		w.WriteByte('}')
		return nil
	case []any:
		w.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := emitJSON(w, e); err != nil {
				return err
			}
		}
		w.WriteByte(']')
		return nil
	}
	b, err := json.Marshal(plainValue(v))
	if err != nil {
		return errors.New("a decrypted value cannot be written as JSON")
	}
	w.Write(b)
	return nil
}

// dotenvMetaKey matches the flattened age and pgp entries of dotenv metadata.
var dotenvMetaKey = regexp.MustCompile(`^(age|pgp)__list_(\d+)__map_(recipient|fp|enc)$`)

// parseSOPSDotenv reads KEY=VALUE lines ("\n" escaped as \n) as sops' dotenv store does;
// the metadata are the sops_-prefixed keys, flattened.
func parseSOPSDotenv(b []byte) (*sopsDoc, bool, error) {
	doc := &sopsMap{}
	meta := &sopsMetadata{}
	age, pgp := map[int]*sopsAgeKey{}, map[int]*sopsPGPKey{}
	for i, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, false, nil // not a dotenv file sops could have written
		}
		val = strings.ReplaceAll(val, `\n`, "\n")
		if mk, isMeta := strings.CutPrefix(key, "sops_"); isMeta {
			if err := dotenvMeta(meta, age, pgp, mk, val); err != nil {
				return nil, false, fmt.Errorf("line %d: %w", i+1, err)
			}
			continue
		}
		doc.keys = append(doc.keys, key)
		doc.vals = append(doc.vals, val)
	}
	if !isSOPSMeta(meta) {
		return nil, false, nil
	}
	for _, i := range sortedKeys(age) {
		meta.Age = append(meta.Age, *age[i])
	}
	for _, i := range sortedKeys(pgp) {
		meta.PGP = append(meta.PGP, *pgp[i])
	}
	return &sopsDoc{format: formatDotenv, docs: []*sopsMap{doc}, meta: meta}, true, nil
}

func dotenvMeta(meta *sopsMetadata, age map[int]*sopsAgeKey, pgp map[int]*sopsPGPKey, key, val string) error {
	if m := dotenvMetaKey.FindStringSubmatch(key); m != nil {
		i, _ := strconv.Atoi(m[2])
		if m[1] == "age" {
			if age[i] == nil {
				age[i] = &sopsAgeKey{}
			}
			if m[3] == "enc" {
				age[i].Enc = val
			} else {
				age[i].Recipient = val
			}
		} else {
			if pgp[i] == nil {
				pgp[i] = &sopsPGPKey{}
			}
			if m[3] == "enc" {
				pgp[i].Enc = val
			} else {
				pgp[i].Fingerprint = val
			}
		}
		return nil
	}
	fields := map[string]*string{
		"lastmodified": &meta.LastModified, "mac": &meta.MAC,
		"unencrypted_suffix": &meta.UnencryptedSuffix, "encrypted_suffix": &meta.EncryptedSuffix,
		"unencrypted_regex": &meta.UnencryptedRegex, "encrypted_regex": &meta.EncryptedRegex,
		"unencrypted_comment_regex": &meta.UnencryptedCommentRegex, "encrypted_comment_regex": &meta.EncryptedCommentRegex,
	}
	switch {
	case fields[key] != nil:
		*fields[key] = val
	case key == "mac_only_encrypted":
		meta.MACOnlyEncrypted = val == "true"
	case strings.HasPrefix(key, "key_groups"):
		meta.KeyGroups = append(meta.KeyGroups, key)
	}
	return nil
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// emitDotenv writes KEY=VALUE lines, newlines escaped, as `sops -d` does.
func emitDotenv(doc *sopsMap) ([]byte, error) {
	var buf bytes.Buffer
	for i, k := range doc.keys {
		var s string
		switch v := doc.vals[i].(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		case *sopsMap, []any:
			return nil, fmt.Errorf("%s: a dotenv value cannot be a mapping or a list", k)
		default:
			s = fmt.Sprint(v)
		}
		fmt.Fprintf(&buf, "%s=%s\n", k, strings.ReplaceAll(s, "\n", `\n`))
	}
	return buf.Bytes(), nil
}
