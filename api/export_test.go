package api

import (
	"context"
	"strings"
	"time"

	"herald/store"
)

// SetTokenLookup replaces how h finds a token by id (tests count the
// lookups, which are database queries).
func SetTokenLookup(h *Handler, f func(ctx context.Context, id string) (store.TokenCredential, error)) {
	h.lookup = f
}

// ConsoleWorkflowURL is the console's link to a workflow run in the
// Temporal UI at temporalUI, for namespace.
func ConsoleWorkflowURL(temporalUI, namespace, workflowID, runID string) string {
	c := &console{h: &Handler{namespace: namespace}, temporalUI: strings.TrimRight(temporalUI, "/")}
	return c.workflowURL(workflowID, runID)
}

// SetReplayBudget sets how long a replay window may begin keys.
func SetReplayBudget(h *Handler, d time.Duration) { h.replayBudget = d }

// SetTemporal replaces h's Temporal client (tests wrap the real one).
func SetTemporal(h *Handler, c TemporalClient) { h.temporal = c }

// HandlerTemporal is h's Temporal client.
func HandlerTemporal(h *Handler) TemporalClient { return h.temporal }
