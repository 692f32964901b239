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

// startAttributes are sa, the search attributes of a run the relay starts,
// with the BuildIds its first workflow task's worker will give it
// (workflows.WithBuildID, Relay.BuildID), unless Temporal refused them.
func (r *Relay) startAttributes(sa temporal.SearchAttributes) temporal.SearchAttributes {
	if r.buildIDsRefused.Load() {
		return sa
	}
	return workflows.WithBuildID(sa, r.BuildID)
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
