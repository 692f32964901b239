package relay

import (
	"errors"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"herald/workflows"
)

// withBuildIDs makes call, a start of a run with opts, with base (the run's
// search attributes) and the BuildIds its first workflow task's worker
// will give it (workflows.WithBuildID, Relay.BuildID), unless Temporal
// refused them; when Temporal refuses them now, it makes call again with
// base alone (refusedBuildIDs). It returns call's last error.
func (r *Relay) withBuildIDs(opts *client.StartWorkflowOptions, base temporal.SearchAttributes, call func() error) error {
	opts.TypedSearchAttributes = base
	if !r.buildIDsRefused.Load() {
		opts.TypedSearchAttributes = workflows.WithBuildID(base, r.BuildID)
	}
	err := call()
	if r.refusedBuildIDs(err, *opts) {
		opts.TypedSearchAttributes = base
		err = call()
	}
	return err
}

// refusedBuildIDs reports whether err is Temporal refusing the BuildIds of
// a start that carried them (a server that does not let a client set that
// attribute), the start to be sent again without them: from then on the
// relay starts every run without them, and says so once. Such a run costs
// its server one more visibility write, as before they were sent.
func (r *Relay) refusedBuildIDs(err error, opts client.StartWorkflowOptions) bool {
	var invalid *serviceerror.InvalidArgument
	if err == nil || !errors.As(err, &invalid) || !strings.Contains(invalid.Error(), workflows.SABuildIDs.GetName()) {
		return false
	}
	if _, ok := opts.TypedSearchAttributes.GetKeywordList(workflows.SABuildIDs); !ok {
		return false
	}
	if r.buildIDsRefused.CompareAndSwap(false, true) {
		r.Logger.Warn("Temporal refused the BuildIds search attribute in a start: keys' runs are started without it",
			zap.Error(err))
	}
	return true
}
