// Package helm renders Helm charts for converge: a chart directory and layered values become
// Kubernetes objects, exactly as Helm's install renders them (the Helm SDK's engine, values
// coalescing, dependency processing and manifest sorting are used, not re-implemented), but
// without Helm releases: converge applies, prunes, waits and rolls back the objects itself.
//
// What the package guarantees:
//
//   - No network, ever. Dependencies must be vendored under charts/ (directories or .tgz
//     archives); one named by Chart.yaml or Chart.lock but missing is an error naming it.
//     Template functions that could reach out are disabled as in helm template
//     (getHostByName answers ""), env and expandenv do not exist, and lookup goes only
//     through the caller's Options.Lookup (none: an empty map). values.schema.json is checked
//     as Helm does, but its $refs load nothing (Helm's validator reads file: and http: refs).
//   - Confined files. LoadChart reads the directory itself (never Helm's directory loader,
//     which follows symlinks): a symlink is followed only to a regular file inside the chart;
//     a symlink leaving the chart or naming a directory, and irregular files, are refused.
//     Archive entries must be regular files inside the archive's top directory. .Files of a
//     template holds the chart's own files only.
//   - Bounds. A chart with its subcharts is at most MaxChartBytes bytes and MaxChartFiles
//     files, one file at most MaxChartFileSize, archives nested at most four deep; sizes are
//     checked before data is inflated. A render ends with ctx (the caller is returned to at
//     once; the template goroutine stops at its next function call), and is bounded by
//     Options.MaxOutputBytes and Options.MaxLookups. Functions whose result grows with an
//     argument (repeat, indent, nindent, until, untilStep, seq, rand*) are refused before
//     they run when the result would exceed the bound. Helm's engine bounds nested include
//     (1000 deep) but not tpl: each tpl starts a fresh execution.
//
// Known limits, which is why the daemon and the CLI render charts in a worker process
// (sync/render's Pool: memory, stack and time bounded, killed at the deadline) and never
// in their own: a recursion through tpl grows the stack and heap until the Go runtime
// aborts the process; include and tpl results are not counted against the output bound, so
// a chain of defines each including the next twice allocates without limit; and a
// template loop whose body calls no function at all (a range over a large integer or
// nested ranges over values, emitting only text) cannot be interrupted inside Helm's
// engine: Render returns at the deadline with ErrRenderBound, but that goroutine runs
// until the loop ends (OverdueRenders counts them; a worker that has one is ended). While
// MaxOverdueRenders such goroutines run, Render refuses to start another, so retries of a
// hostile chart in one process cannot pile them up.
//
// A Chart is immutable once loaded and may be rendered concurrently.
package helm
