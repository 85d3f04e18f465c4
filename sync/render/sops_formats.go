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
