package localcluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcStat reads /proc/<pid>/stat: the command name, and the fields after it from the
// state on (see proc(5): fields[0] is the state, [1] the parent's pid, [11] and [12] the
// user and system time in clock ticks, [19] the start time). The command name stands in
// parentheses and may itself hold spaces and parentheses: the fields start after the last
// ')'.
func ProcStat(pid int) (comm string, fields []string, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", nil, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", nil, fmt.Errorf("/proc/%d/stat: no command name in %q", pid, b)
	}
	return string(b[open+1 : end]), strings.Fields(string(b[end+1:])), nil
}
