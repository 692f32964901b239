package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"herald/workflows"
)

// NewNamespace registers a fresh Temporal namespace with Herald's search
// attributes, so tests that share one dev server (and Herald's fixed task
// queue and readable workflow ids) cannot see each other's workflows.
func NewNamespace(t testing.TB) (address, namespace string) {
	t.Helper()
	address = TemporalAddress(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	namespace = "test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(client.Options{HostPort: address, Logger: QuietLogger{}})
	if err != nil {
		t.Fatalf("testenv: dial Temporal: %v", err)
	}
	defer c.Close()
	if _, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        namespace,
		WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}); err != nil {
		t.Fatalf("testenv: register namespace: %v", err)
	}
	for {
		_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace: namespace, SearchAttributes: workflows.SearchAttributeTypes(),
		})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("testenv: add search attributes to %s: %v", namespace, err)
		}
		time.Sleep(200 * time.Millisecond) // the new namespace takes a moment to be known
	}
	// Wait until the namespace answers visibility queries with the attributes.
	for {
		_, err := c.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: namespace, Query: `HeraldStatus = "failed"`,
		})
		if err == nil {
			return address, namespace
		}
		if ctx.Err() != nil {
			t.Fatalf("testenv: namespace %s not ready: %v", namespace, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// QuietLogger drops the Temporal SDK's logs of a test's own client (set-up,
// diagnostics), which would only crowd the test's log.
type QuietLogger struct{}

func (QuietLogger) Debug(string, ...any) {}
func (QuietLogger) Info(string, ...any)  {}
func (QuietLogger) Warn(string, ...any)  {}
func (QuietLogger) Error(string, ...any) {}
