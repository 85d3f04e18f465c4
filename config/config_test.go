package config

import (
	"strings"
	"testing"
)

func TestBuildRejectsBadInput(t *testing.T) {
	for _, tc := range []struct{ name, overlay, image, want string }{
		{"unknown overlay", "crd", "", `unknown overlay "crd"`},
		{"empty digest", Default, "example.com/converge@", "invalid image"},
		{"no name", Default, ":v1", "invalid image"},
		{"blank", MultiTenant, "example.com/con verge", "invalid image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.overlay, tc.image)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build(%q, %q) = %v, want an error containing %q", tc.overlay, tc.image, err, tc.want)
			}
		})
	}
}

func TestCRDs(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(crds))
	for _, c := range crds {
		names = append(names, c.Name)
	}
	want := []string{"notifiers.converge.dev", "synctargets.converge.dev", "synctargetsets.converge.dev"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("CRDs() = %v, want %v", names, want)
	}
}
