package testcharts

import (
	"fmt"
	"strings"
)

// Hostile charts: templates that a tenant may write and that the render boundary must
// contain, each costing only its own render. Every chart is a map of file name to content,
// named by its Chart.yaml as given.

// TplRecursion is a chart whose one template calls tpl on itself without end: Helm bounds
// nested include, not tpl, so each call starts a fresh execution on a deeper stack.
func TplRecursion(name string) map[string]string {
	return map[string]string{
		"Chart.yaml":          chartYAML(name),
		"templates/boom.yaml": `{{ tpl "{{ tpl . . }}" "{{ tpl . . }}" }}` + "\n",
	}
}

// TplRecursionThroughValues is TplRecursion reached by a tenant who can only set values:
// an ordinary chart rendering tpl .Values.message, and values that make it recurse.
func TplRecursionThroughValues(name string) (chart map[string]string, values string) {
	return map[string]string{
		"Chart.yaml": chartYAML(name),
		"templates/cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-message
data:
  message: {{ tpl .Values.message $ | quote }}
`,
		"values.yaml": "message: hello\n",
	}, "message: '{{ tpl .Values.message $ }}'\n"
}

// IncludeDoubling is a chain of defines each including the next twice: its output grows
// as 2^levels, none of it through a function whose result the engine sees before it is
// built whole.
func IncludeDoubling(name string, levels int) map[string]string {
	var b strings.Builder
	b.WriteString(`{{- define "l0" }}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{{ end }}` + "\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, `{{- define "l%d" }}{{ include "l%d" . }}{{ include "l%d" . }}{{ end }}`+"\n", i, i-1, i-1)
	}
	fmt.Fprintf(&b, `apiVersion: v1
kind: ConfigMap
metadata:
  name: doubled
data:
  x: {{ include "l%d" . | len | quote }}
`, levels)
	return map[string]string{"Chart.yaml": chartYAML(name), "templates/doubling.yaml": b.String()}
}

// ListDoubling nests a list in itself levels times, then turns it into JSON: a template of
// a few hundred bytes whose memory doubles with each line.
func ListDoubling(name string, levels int) map[string]string {
	var b strings.Builder
	b.WriteString("{{- $x := list 1 }}\n")
	for range levels {
		b.WriteString("{{- $x = list $x $x }}\n")
	}
	b.WriteString(`apiVersion: v1
kind: ConfigMap
metadata:
  name: listed
data:
  x: {{ toJson $x | len | quote }}
`)
	return map[string]string{"Chart.yaml": chartYAML(name), "templates/lists.yaml": b.String()}
}

// NestedRange loops 10^18 times calling no function: nothing inside Helm's engine can
// interrupt it.
func NestedRange(name string) map[string]string {
	return map[string]string{
		"Chart.yaml":          chartYAML(name),
		"templates/spin.yaml": "{{ range 1000000000 }}{{ range 1000000000 }}{{ end }}{{ end }}\n",
	}
}

// Benign is a small well-behaved chart: one ConfigMap whose data is the value message.
func Benign(name string) map[string]string {
	return map[string]string{
		"Chart.yaml": chartYAML(name),
		"templates/cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-benign
data:
  message: {{ .Values.message | quote }}
`,
		"values.yaml": "message: hello\n",
	}
}

func chartYAML(name string) string {
	return fmt.Sprintf("apiVersion: v2\nname: %s\nversion: 0.1.0\n", name)
}
