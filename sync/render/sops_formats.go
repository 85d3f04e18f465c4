package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
	var nodes []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, false, nil // not YAML: not ours to judge
		}
		if len(n.Content) > 0 {
			nodes = append(nodes, n.Content[0])
		}
	}
	if len(nodes) == 0 {
		return nil, false, nil
	}
	meta, found, err := yamlSOPSMeta(nodes[0])
	if !found {
		for _, n := range nodes[1:] {
			if _, found, _ := yamlSOPSMeta(n); found {
				return nil, true, errors.New("the sops metadata is not in the first document")
			}
		}
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	doc := &sopsDoc{format: formatYAML, meta: meta}
	for _, n := range nodes {
		if n.Kind != yaml.MappingNode {
			return nil, true, errors.New("a document is not a mapping")
		}
		v, err := yamlTree(n, 1, maxDepth)
		if err != nil {
			return nil, true, err
		}
		doc.docs = append(doc.docs, v.(*sopsMap).without("sops"))
	}
	return doc, true, nil
}

// yamlSOPSMeta decodes the sops metadata of a top-level mapping. found is whether it
// has any: a sops mapping with mac and lastmodified keys; its decoding errors then are
// errors, not a reason to pass the file on.
func yamlSOPSMeta(top *yaml.Node) (meta *sopsMetadata, found bool, err error) {
	if top.Kind != yaml.MappingNode {
		return nil, false, nil
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "sops" || top.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		keys := map[string]bool{}
		for j := 0; j+1 < len(top.Content[i+1].Content); j += 2 {
			keys[top.Content[i+1].Content[j].Value] = true
		}
		if !keys["mac"] || !keys["lastmodified"] {
			continue
		}
		m := &sopsMetadata{}
		if err := top.Content[i+1].Decode(m); err != nil {
			return nil, true, fmt.Errorf("invalid sops metadata: %w", err)
		}
		return m, true, checkMeta(m)
	}
	return nil, false, nil
}

// checkMeta refuses metadata that cannot be used.
func checkMeta(m *sopsMetadata) error {
	if !isSOPSMeta(m) {
		return errors.New("the sops metadata has an empty mac or lastmodified")
	}
	return nil
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
