package main

import "testing"

func TestTopFunctions(t *testing.T) {
	out := `File: converge
Type: cpu
Time: Dec 3, 2026 at 9:40am (UTC)
Duration: 6s, Total samples = 1.20s (20.00%)
Showing nodes accounting for 0.62s, 51.67% of 1.20s total
Showing top 5 nodes out of 310
      flat  flat%   sum%        cum   cum%
     0.20s 16.67% 16.67%      0.25s 20.83%  runtime.scanobject
     0.15s 12.50% 29.17%      0.15s 12.50%  syscall.Syscall6
     0.12s 10.00% 39.17%      0.30s 25.00%  encoding/json.(*decodeState).object
     0.10s  8.33% 47.50%      0.10s  8.33%  runtime.memmove
     0.05s  4.17% 51.67%      0.05s  4.17%  sigs.k8s.io/structured-merge-diff/v6/value.(*valueUnstructured).AsMap
`
	want := "runtime.scanobject 16.67%, syscall.Syscall6 12.50%, encoding/json.(*decodeState).object 10.00%, runtime.memmove 8.33%, " +
		"sigs.k8s.io/structured-merge-diff/v6/value.(*valueUnstructured).AsMap 4.17%"
	if got := topFunctions(out); got != want {
		t.Errorf("topFunctions:\n got %s\nwant %s", got, want)
	}
	if got := topFunctions("File: converge\n"); got != "(no samples)" {
		t.Errorf("topFunctions of an empty profile = %q", got)
	}
}
