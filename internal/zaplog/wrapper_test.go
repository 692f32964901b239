package zaplog

import "go.temporal.io/sdk/log"

// oneFrame stands for the SDK's replay-aware logger: each call adds one stack
// frame, and WithCallerSkip passes the skip on to the logger it wraps.
type oneFrame struct{ inner log.Logger }

func (o oneFrame) Debug(msg string, kv ...any) { o.inner.Debug(msg, kv...) }
func (o oneFrame) Info(msg string, kv ...any)  { o.inner.Info(msg, kv...) }
func (o oneFrame) Warn(msg string, kv ...any)  { o.inner.Warn(msg, kv...) }
func (o oneFrame) Error(msg string, kv ...any) { o.inner.Error(msg, kv...) }

func (o oneFrame) WithCallerSkip(depth int) log.Logger {
	if s, ok := o.inner.(log.WithSkipCallers); ok {
		return oneFrame{inner: s.WithCallerSkip(depth)}
	}
	return o
}
