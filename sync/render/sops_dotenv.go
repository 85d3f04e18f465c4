package render

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// dotenvMetaKey matches the flattened age and pgp entries of dotenv metadata.
var dotenvMetaKey = regexp.MustCompile(`^(age|pgp)__list_(\d+)__map_(recipient|fp|enc)$`)

// parseSOPSDotenv reads KEY=VALUE lines ("\n" escaped as \n) as sops' dotenv store does;
// the metadata are the sops_-prefixed keys, flattened.
func parseSOPSDotenv(b []byte) (*sopsDoc, bool, error) {
	text := "\n" + string(b)
	if !strings.Contains(text, "\nsops_mac=") || !strings.Contains(text, "\nsops_lastmodified=") {
		return nil, false, nil
	}
	doc := &sopsMap{}
	meta := &sopsMetadata{}
	age, pgp := map[int]*sopsAgeKey{}, map[int]*sopsPGPKey{}
	for i, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, true, fmt.Errorf("line %d is not KEY=VALUE", i+1)
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
	if err := checkMeta(meta); err != nil {
		return nil, true, err
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
