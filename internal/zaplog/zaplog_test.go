package zaplog

import (
	"strings"
	"testing"

	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestWrappedLoggerNamesTheCallersLine builds the chain the SDK builds for
// workflow.GetLogger (internal_event_handlers.go in go.temporal.io/sdk):
// log.With on this adapter, wrapped by a replay-aware logger (one extra
// frame, here oneFrame in wrapper_test.go), then log.Skip(…, 1). The line
// logged must name this file, the caller, not the wrapper: without
// WithCallerSkip every workflow log line named the SDK's replay_logger.go.
func TestWrappedLoggerNamesTheCallersLine(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := log.Skip(oneFrame{inner: log.With(ForTemporal(zap.New(core, zap.AddCaller())), "WorkflowType", "Delivery")}, 1)
	l.Info("from workflow code")
	entries := logs.All()
	if len(entries) != 1 {
		t.Fatalf("logged %d lines, want 1", len(entries))
	}
	if !strings.HasSuffix(entries[0].Caller.File, "internal/zaplog/zaplog_test.go") {
		t.Errorf("the line names %s:%d as its caller, want zaplog_test.go", entries[0].Caller.File, entries[0].Caller.Line)
	}
	if got := entries[0].ContextMap()["WorkflowType"]; got != "Delivery" {
		t.Errorf("WorkflowType = %v, want the field given to With", got)
	}
}

// TestDirectLogNamesItsCaller checks the adapter's own frame: a call through
// the log.Logger interface names the caller of Info.
func TestDirectLogNamesItsCaller(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := ForTemporal(zap.New(core, zap.AddCaller()))
	l.Info("direct")
	l.With("k", "v").Info("with")
	if len(logs.All()) != 2 {
		t.Fatalf("logged %d lines, want 2", len(logs.All()))
	}
	for _, e := range logs.All() {
		if !strings.HasSuffix(e.Caller.File, "internal/zaplog/zaplog_test.go") {
			t.Errorf("%q names %s as its caller", e.Message, e.Caller.File)
		}
	}
}
