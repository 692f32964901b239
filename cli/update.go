package cli

import (
	"herald/reason"
	"herald/workflows"
)

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

// reasonText is an operator reason code with its explanation, when there
// is one (reason.Texts).
func reasonText(code reason.Code) string {
	if code == "" {
		return "no reason given"
	}
	if s, ok := reason.Texts[code]; ok {
		return string(code) + " (" + s + ")"
	}
	return string(code)
}
