package reconciler

import (
	"errors"

	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
)

// TriggerSource asks for a poll of the chart or artifact whose charts.Source.Key is key
// now, for every SyncTarget following it: a registry's push webhook (sync/webhook) names
// it. It returns sources.ErrNotSubscribed when no SyncTarget of this replica follows it,
// as the Git scheduler does, and sources.ErrQueueFull when too many polls wait.
func (f *ChartFetcher) TriggerSource(key string) error {
	err := f.scheduler().TriggerKey(key)
	if errors.Is(err, charts.ErrNotSubscribed) {
		return sources.ErrNotSubscribed
	}
	return err
}
