package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

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
	rawMeta, isMap := raw.(*sopsMap)
	if !found || !isMap {
		return nil, false, nil
	}
	if _, hasMAC := rawMeta.get("mac"); !hasMAC {
		return nil, false, nil
	}
	if _, hasLM := rawMeta.get("lastmodified"); !hasLM {
		return nil, false, nil
	}
	js, err := json.Marshal(plainValue(raw))
	if err != nil {
		return nil, true, errors.New("invalid sops metadata")
	}
	meta := &sopsMetadata{}
	if err := json.Unmarshal(js, meta); err != nil {
		return nil, true, fmt.Errorf("invalid sops metadata: %w", err)
	}
	if err := checkMeta(meta); err != nil {
		return nil, true, err
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
