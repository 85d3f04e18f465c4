package helm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
)

// validateSchemas checks the coalesced values against values.schema.json of the chart and of
// each subchart (with that subchart's values), as Helm's install does, but a schema may not
// load anything: Helm's validator follows $ref to local files and over HTTP, this one refuses
// both (a urn: reference is permissive, as Helm's is when unresolved).
func validateSchemas(ch *chartv2.Chart, values map[string]any) error {
	var sb strings.Builder
	if len(ch.Schema) > 0 {
		if err := validateSchema(ch.Schema, values); err != nil {
			fmt.Fprintf(&sb, "%s:\n%s\n", ch.Name(), err)
		}
	}
	for _, sub := range ch.Dependencies() {
		raw, ok := values[sub.Name()]
		if !ok || raw == nil {
			continue
		}
		subValues, ok := raw.(map[string]any)
		if !ok {
			fmt.Fprintf(&sb, "%s:\ninvalid type for values: expected object (map), got %T\n", sub.Name(), raw)
			continue
		}
		if err := validateSchemas(sub, subValues); err != nil {
			sb.WriteString(err.Error())
		}
	}
	if sb.Len() > 0 {
		return errors.New(sb.String())
	}
	return nil
}

const schemaURL = "file:///values.schema.json"

func validateSchema(schemaJSON []byte, values map[string]any) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return fmt.Errorf("values.schema.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return err
	}
	schema, err := c.Compile(schemaURL)
	if err != nil {
		return err
	}
	if err := schema.Validate(values); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "jsonschema validation failed with '"+schemaURL+"#'\n"))
	}
	return nil
}

// noLoader loads no schema from anywhere: no files, no network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	if strings.HasPrefix(url, "urn:") {
		return true, nil
	}
	return nil, fmt.Errorf("schema reference %s: not loaded (a chart's schema may not read files or the network)", url)
}
