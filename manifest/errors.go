package manifest

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a manifest.
type Problem struct {
	// Field is the path of the offending value, such as "events[2].dataSchema"
	// or "subscribes[0].type"; empty when the problem concerns the whole file.
	Field string
	// Message says what is wrong, naming the event where there is one.
	Message string
}

// ValidationError reports every problem found in one manifest. Parse and
// Validate return it for any manifest they refuse.
type ValidationError struct {
	// Source is where the manifest was read from (Manifest.Source).
	Source string
	// App is the app id, when the manifest got far enough to name one.
	App string
	// Problems lists what is wrong, in the order found; never empty.
	Problems []Problem
}

// Error renders one line per problem, for example
//
//	manifest examples/contacts.json (app "contacts"): events[0].version: must be an integer from 1 to 1000000, got 0
func (e *ValidationError) Error() string {
	prefix := "manifest"
	if e.Source != "" {
		prefix += " " + e.Source
	}
	if e.App != "" {
		prefix += " (app " + quote(e.App) + ")"
	}
	if len(e.Problems) == 0 {
		return prefix + ": invalid"
	}
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		if p.Field == "" {
			lines[i] = prefix + ": " + p.Message
		} else {
			lines[i] = prefix + ": " + p.Field + ": " + p.Message
		}
	}
	return strings.Join(lines, "\n")
}

// problems collects Problems while a manifest is decoded or validated.
type problems []Problem

func (ps *problems) add(field, format string, args ...any) {
	*ps = append(*ps, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
}

// asError returns a *ValidationError for the collected problems, or nil.
func (ps problems) asError(source, app string) error {
	if len(ps) == 0 {
		return nil
	}
	return &ValidationError{Source: source, App: app, Problems: ps}
}
