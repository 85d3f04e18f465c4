package reconciler

import (
	"fmt"
	"sort"
	"time"

	"github.com/robfig/cron/v3"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// window is a parsed SyncWindow.
type window struct {
	kind     convergev1.SyncWindowKind
	schedule cron.Schedule
	duration time.Duration
}

// openAt reports whether the window is open at t, and when that opening ends: it is
// open when an activation a has a <= t < a+duration, that is when the first activation
// after t-duration is not after t.
func (w window) openAt(t time.Time) (bool, time.Time) {
	a := w.schedule.Next(t.Add(-w.duration))
	if a.After(t) {
		return false, time.Time{}
	}
	return true, a.Add(w.duration)
}

func parseWindows(ws []convergev1.SyncWindow) ([]window, error) {
	out := make([]window, 0, len(ws))
	for i, w := range ws {
		spec := string(w.Schedule)
		if w.TimeZone != "" {
			if _, err := time.LoadLocation(w.TimeZone); err != nil {
				return nil, fmt.Errorf("spec.syncWindows[%d].timeZone: %w", i, err)
			}
			spec = "CRON_TZ=" + w.TimeZone + " " + spec
		}
		s, err := cronParser.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("spec.syncWindows[%d].schedule: %w", i, err)
		}
		out = append(out, window{kind: w.Kind, schedule: s, duration: w.Duration.Duration})
	}
	return out, nil
}

// SyncAllowed says whether the windows allow a sync at now: inside an allow window (when
// there are any) and outside every deny window. When not, it also returns the first time
// they will.
func SyncAllowed(now time.Time, windows []convergev1.SyncWindow) (bool, time.Time, error) {
	ws, err := parseWindows(windows)
	if err != nil {
		return false, time.Time{}, err
	}
	if allowedAt(ws, now) {
		return true, now, nil
	}
	// Candidates: when an open deny window closes, when an allow window opens next.
	var candidates []time.Time
	for _, w := range ws {
		if open, end := w.openAt(now); open && w.kind == convergev1.DenyWindow {
			candidates = append(candidates, end)
		}
		if w.kind == convergev1.AllowWindow {
			candidates = append(candidates, w.schedule.Next(now))
		}
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].Before(candidates[j]) })
	for _, c := range candidates {
		if allowedAt(ws, c) {
			return false, c, nil
		}
	}
	return false, now.Add(time.Hour), nil
}

func allowedAt(ws []window, t time.Time) bool {
	hasAllow, inAllow := false, false
	for _, w := range ws {
		open, _ := w.openAt(t)
		switch w.kind {
		case convergev1.DenyWindow:
			if open {
				return false
			}
		case convergev1.AllowWindow:
			hasAllow = true
			inAllow = inAllow || open
		}
	}
	return !hasAllow || inAllow
}
