// Package filter holds subscription content filters: CEL expressions over a
// CloudEvent that decide whether an event is delivered to a subscription,
// such as `data.total > 1000 && subject.startsWith("eu-")`.
//
// An expression sees the event's attributes as variables: data (the event
// data, any JSON), subject, type, id, source, specversion, datacontenttype
// (strings), dataversion (int) and time (a timestamp). Extensions are in
// ext, a map of string to any value. It must yield a bool.
package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
)

// Limits of one filter.
const (
	// MaxLength caps an expression's text.
	MaxLength = 2000
	// CostLimit caps the work of one evaluation (CEL cost units, about one
	// per operation), so a filter over a large event cannot hold the relay.
	CostLimit = 100_000
)

// Filter is a compiled content filter; it is safe for concurrent use.
type Filter struct {
	text string
	prg  cel.Program
}

var env = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("data", cel.DynType),
		cel.Variable("subject", cel.StringType),
		cel.Variable("type", cel.StringType),
		cel.Variable("id", cel.StringType),
		cel.Variable("source", cel.StringType),
		cel.Variable("specversion", cel.StringType),
		cel.Variable("datacontenttype", cel.StringType),
		cel.Variable("dataversion", cel.IntType),
		cel.Variable("time", cel.TimestampType),
		cel.Variable("ext", cel.MapType(cel.StringType, cel.DynType)),
	)
	if err != nil {
		panic(fmt.Sprintf("filter: CEL environment: %v", err)) // fixed declarations: a programming error
	}
	return e
}()

// Compile checks and compiles an expression. The error says what is wrong
// and where, for a manifest's author.
func Compile(text string) (*Filter, error) {
	if text == "" {
		return nil, errors.New("empty filter")
	}
	if len(text) > MaxLength {
		return nil, fmt.Errorf("filter is %d characters long, at most %d", len(text), MaxLength)
	}
	ast, iss := env.Compile(text)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("filter does not compile: %v", iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("filter yields %s, want a bool", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	return &Filter{text: text, prg: prg}, nil
}

// String returns the expression.
func (f *Filter) String() string { return f.text }

// Match evaluates the filter against a CloudEvent in its JSON form. An
// evaluation error (a missing field, a wrong type, the cost limit) is
// returned with false: the caller decides, Herald counts it as no match.
func (f *Filter) Match(envelope []byte) (bool, error) {
	vars, err := Variables(envelope)
	if err != nil {
		return false, err
	}
	return f.MatchVars(vars)
}

// MatchVars is Match over variables made by Variables, so an event read
// once can be matched against several filters.
func (f *Filter) MatchVars(vars map[string]any) (bool, error) {
	out, _, err := f.prg.Eval(vars)
	if err != nil {
		return false, fmt.Errorf("filter %q: %w", f.text, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("filter %q yielded %v, not a bool", f.text, out.Value())
	}
	return b, nil
}

// known are the CloudEvent attributes that are variables of their own.
var known = map[string]bool{"data": true, "subject": true, "type": true, "id": true, "source": true,
	"specversion": true, "datacontenttype": true, "dataversion": true, "time": true}

// Variables reads a CloudEvent's JSON into a filter's variables.
func Variables(envelope []byte) (map[string]any, error) {
	var raw map[string]any
	d := json.NewDecoder(bytes.NewReader(envelope))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		return nil, fmt.Errorf("filter: event is not a JSON object: %w", err)
	}
	vars := map[string]any{"data": nil, "subject": "", "type": "", "id": "", "source": "",
		"specversion": "", "datacontenttype": "", "dataversion": int64(0), "time": time.Time{}}
	ext := map[string]any{}
	for k, v := range raw {
		if !known[k] {
			ext[k] = numbers(v)
			continue
		}
		switch k {
		case "data":
			vars[k] = numbers(v)
		case "dataversion":
			if n, ok := v.(json.Number); ok {
				if i, err := n.Int64(); err == nil {
					vars[k] = i
				}
			}
		case "time":
			if s, ok := v.(string); ok {
				if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
					vars[k] = t
				}
			}
		default:
			if s, ok := v.(string); ok {
				vars[k] = s
			}
		}
	}
	vars["ext"] = ext
	return vars, nil
}

// numbers turns JSON numbers into int64 where they are whole and fit, and
// float64 otherwise, so `data.total > 1000` compares as a CEL user expects.
func numbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
		return v
	}
	return v
}
