// Package zaplog builds Herald's zap logger and bridges it into Temporal's
// logger interface, so SDK logs come out with the same format and fields.
package zaplog

import (
	"fmt"

	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a JSON logger at the given level (debug, info, warn, error).
func New(level string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.EncoderConfig.TimeKey = "time"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.Sampling = nil
	return cfg.Build()
}

// Temporal adapts a zap logger to Temporal's log.Logger.
type Temporal struct{ z *zap.Logger }

var (
	_ log.Logger          = Temporal{}
	_ log.WithLogger      = Temporal{}
	_ log.WithSkipCallers = Temporal{}
)

// ForTemporal wraps z for the Temporal SDK.
func ForTemporal(z *zap.Logger) Temporal { return Temporal{z: z.WithOptions(zap.AddCallerSkip(1))} }

// Debug logs at debug level.
func (t Temporal) Debug(msg string, keyvals ...any) { t.z.Debug(msg, fields(keyvals)...) }

// Info logs at info level.
func (t Temporal) Info(msg string, keyvals ...any) { t.z.Info(msg, fields(keyvals)...) }

// Warn logs at warn level.
func (t Temporal) Warn(msg string, keyvals ...any) { t.z.Warn(msg, fields(keyvals)...) }

// Error logs at error level.
func (t Temporal) Error(msg string, keyvals ...any) { t.z.Error(msg, fields(keyvals)...) }

// With returns a logger with the key-value pairs added to every entry.
func (t Temporal) With(keyvals ...any) log.Logger { return Temporal{z: t.z.With(fields(keyvals)...)} }

// WithCallerSkip returns a logger that skips depth more stack frames when it
// names the caller. The SDK's workflow logger wraps this one and asks for it,
// so a workflow's log line names the workflow's code, not the SDK's
// replay-aware wrapper.
func (t Temporal) WithCallerSkip(depth int) log.Logger {
	return Temporal{z: t.z.WithOptions(zap.AddCallerSkip(depth))}
}

// fields turns Temporal's alternating key-value list into zap fields.
func fields(keyvals []any) []zap.Field {
	out := make([]zap.Field, 0, len(keyvals)/2+1)
	for i := 0; i < len(keyvals); i += 2 {
		key, ok := keyvals[i].(string)
		if !ok {
			key = fmt.Sprint(keyvals[i])
		}
		if i+1 >= len(keyvals) {
			out = append(out, zap.Any("extra", keyvals[i]))
			break
		}
		out = append(out, zap.Any(key, keyvals[i+1]))
	}
	return out
}
