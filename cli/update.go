package cli

import "herald/workflows"

// updateCommand is the temporal CLI command line that runs the same Update.
func (tc *temporalConn) updateCommand(id, name string, payload any) string {
	return "temporal workflow update execute" + tc.temporalFlags() +
		" --workflow-id " + shellQuote(id) + " --name " + name + " --input " + shellQuote(compactPayload(payload))
}

// updateWithStartCommand is the temporal CLI command line that does the
// same Update-With-Start as keyops.UpdateWithStart.
func (tc *temporalConn) updateWithStartCommand(id, name string, payload any, params workflows.Params) string {
	return "temporal workflow execute-update-with-start" + tc.temporalFlags() +
		" --workflow-id " + shellQuote(id) + " --type " + workflows.DeliveryWorkflowType +
		" --task-queue " + workflows.TaskQueue + " --id-conflict-policy UseExisting" +
		" --input " + shellQuote(compactPayload(params)) +
		" --search-attribute " + shellQuote(workflows.SASubscription.GetName()+"="+quoteJSON(params.SubscriptionID)) +
		" --search-attribute " + shellQuote(workflows.SAApp.GetName()+"="+quoteJSON(params.SubscriberApp)) +
		" --search-attribute " + shellQuote(workflows.SAEventType.GetName()+"="+quoteJSON(params.EventType)) +
		" --update-name " + name + " --update-input " + shellQuote(compactPayload(payload))
}

// reasonTexts explain the reasons an operator action did nothing.
var reasonTexts = map[string]string{
	"nothing_to_redeliver": "the head is not failed, retrying or waiting",
	"no_failed_head":       "the head is not failed, retrying or waiting",
	"event_not_queued":     "that event is not queued for this key",
	"nothing_queued":       "nothing is queued for this key",
	"already_paused":       "the key is paused already",
	"not_paused":           "the key is not paused, and its subscription is not waiting to be re-checked",
	"event_not_found":      "the event is not in the event log",
	"event_not_for_key":    "the event belongs to another subject key or event type",
	"already_queued":       "the event is queued for this key already",
	"requeue_failed":       "the workflow could not read the event log; try again",
}

// reasonText is reason with its explanation, when there is one.
func reasonText(reason string) string {
	if reason == "" {
		reason = "no reason given"
	}
	if s, ok := reasonTexts[reason]; ok {
		return reason + " (" + s + ")"
	}
	return reason
}
