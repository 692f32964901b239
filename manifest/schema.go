package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"herald/internal/jsonvalue"
)

// Limits on an event's dataSchema.
const (
	// MaxSchemaBytes is the largest dataSchema accepted, in bytes of JSON.
	MaxSchemaBytes = 64 << 10
	// MaxSchemaDepth is the deepest nesting of objects and arrays accepted in a
	// dataSchema; the schema object itself is depth 1.
	MaxSchemaDepth = 32
)

// schemaURL is the location a dataSchema is compiled under. It is never
// fetched; it only gives relative references a base, and is cut out of
// messages.
const schemaURL = "mem://herald/dataSchema.json"

// ErrSchemaLimit marks a schema refused for its size or nesting depth rather
// than for its content.
var ErrSchemaLimit = errors.New("schema exceeds a limit")

// limitError says which limit a schema exceeds; it matches ErrSchemaLimit.
type limitError string

func (e limitError) Error() string        { return string(e) }
func (e limitError) Is(target error) bool { return target == ErrSchemaLimit }

// errRemoteRef is what the loader answers for every resource that is not in
// the schema itself or one of the bundled JSON Schema meta-schemas.
var errRemoteRef = errors.New("remote references are never fetched")

// refusingLoader refuses to load anything: a dataSchema must be self-contained.
type refusingLoader struct{}

func (refusingLoader) Load(string) (any, error) { return nil, errRemoteRef }

var englishPrinter = message.NewPrinter(language.English)

// CompileSchema compiles a dataSchema (draft 2020-12 unless it names another
// draft with "$schema"). It refuses schemas over MaxSchemaBytes or nested
// deeper than MaxSchemaDepth, and references to anything outside the schema
// (http, https, file or any other URL): nothing is ever fetched.
//
// It also keeps to a compile budget: numbers within MaxNumberExponent and
// MaxNumberDigits, at most MaxExpandedSchema subschemas once references are
// expanded, and MaxCompileTime. A schema over a limit gets an error matching
// ErrSchemaLimit.
func CompileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	return compileSchema(raw, defaultBudget)
}

func compileSchema(raw json.RawMessage, budget compileBudget) (*jsonschema.Schema, error) {
	start := time.Now()
	deadline := start.Add(budget.maxTime)
	if len(raw) > MaxSchemaBytes {
		return nil, limitError(fmt.Sprintf("schema is larger than %d KiB (%d bytes)", MaxSchemaBytes>>10, len(raw)))
	}
	depth, err := jsonDepth(raw)
	if err != nil {
		return nil, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	if depth > MaxSchemaDepth {
		return nil, limitError(fmt.Sprintf("schema is nested deeper than %d levels", MaxSchemaDepth))
	}
	doc, err := decodeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	if errs := numberErrors(doc); len(errs) > 0 {
		return nil, limitError(fmt.Sprintf("schema has a number out of bounds at %s: %s",
			readablePointer(errs[0].Pointer), errs[0].Message))
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refusingLoader{})
	c.UseRegexpEngine(budgetedRegexp())
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("add schema: %w", err)
	}
	sch, err := compileSafely(c)
	if err != nil {
		return nil, describeCompileError(err)
	}
	if time.Now().After(deadline) {
		return nil, errCompileTime(budget.maxTime)
	}
	if err := checkExpansion(sch, budget, deadline); err != nil {
		return nil, err
	}
	if err := checkRefCycles(sch, budget, deadline); err != nil {
		return nil, err
	}
	return sch, nil
}

// checkRefCycles refuses a schema whose references loop without consuming any
// of the instance (such as {"$ref": "#"}): the compiler accepts it, but every
// validation would fail. Probing with one value of each JSON type finds the
// loops that do not depend on the data's contents.
func checkRefCycles(sch *jsonschema.Schema, budget compileBudget, deadline time.Time) error {
	for _, probe := range []any{nil, true, json.Number("0"), "", []any{}, map[string]any{}} {
		if time.Now().After(deadline) {
			return errCompileTime(budget.maxTime)
		}
		err := validateSafely(sch, probe)
		if p, ok := err.(validatorPanic); ok {
			return fmt.Errorf("schema could not be checked: %v", p.value)
		}
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			continue
		}
		if msg := findRefCycle(verr); msg != "" {
			return errors.New(msg)
		}
	}
	return nil
}

// findRefCycle returns the message of the first reference-cycle error in the
// tree, or "".
func findRefCycle(e *jsonschema.ValidationError) string {
	if _, ok := e.ErrorKind.(*kind.RefCycle); ok {
		return trimSchemaURL(e.ErrorKind.LocalizedString(englishPrinter))
	}
	for _, c := range e.Causes {
		if msg := findRefCycle(c); msg != "" {
			return msg
		}
	}
	return ""
}

// compileSafely compiles the added schema, turning a panic inside the
// compiler into an error: a manifest is outside input and must never crash
// the process reading it.
func compileSafely(c *jsonschema.Compiler) (sch *jsonschema.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			sch, err = nil, fmt.Errorf("schema could not be compiled: %v", r)
		}
	}()
	return c.Compile(schemaURL)
}

// maxSchemaMessages is how many reasons an invalid schema's message lists.
const maxSchemaMessages = 5

// describeCompileError turns a compiler error into a readable message without
// the internal schema location.
func describeCompileError(err error) error {
	var load *jsonschema.LoadURLError
	if errors.As(err, &load) {
		return fmt.Errorf("reference to %q is not allowed: the schema must be self-contained (%w)", trimSchemaURL(load.URL), errRemoteRef)
	}
	var invalid *jsonschema.SchemaValidationError
	if errors.As(err, &invalid) {
		var verr *jsonschema.ValidationError
		if errors.As(invalid.Err, &verr) {
			leaves := flatten(verr)
			var msgs []string
			for i, l := range leaves {
				if i == maxSchemaMessages {
					msgs = append(msgs, fmt.Sprintf("and %d more", len(leaves)-i))
					break
				}
				msgs = append(msgs, "at "+readablePointer(l.Pointer)+": "+l.Message)
			}
			return errors.New(strings.Join(msgs, "; "))
		}
		return errors.New(trimSchemaURL(invalid.Err.Error()))
	}
	return errors.New(trimSchemaURL(err.Error()))
}

// trimSchemaURL removes the internal base location from s, leaving the
// relative part (such as "#/properties/name").
func trimSchemaURL(s string) string {
	s = strings.ReplaceAll(s, schemaURL, "")
	return strings.ReplaceAll(s, "mem://herald/", "")
}

func readablePointer(p string) string {
	if p == "" {
		return "the root"
	}
	return p
}

// DataError is one reason event data fails its schema.
type DataError struct {
	// Pointer is the JSON pointer (RFC 6901) of the offending value in the
	// data: "/name", "/items/0", or "" for the data as a whole.
	Pointer string `json:"pointer"`
	// Message says what is wrong, in English.
	Message string `json:"message"`
}

// ValidateData checks data against a schema from CompileSchema and lists each
// failure (the leaves of the validator's error tree), sorted by pointer and
// message. Data that is not a single JSON value gives one DataError at the
// root. An empty result means the data is valid. Data whose validation
// would exceed MaxValidationSteps is not validated: it gets one DataError at
// the root saying so (ValidateDataWithin tells it apart).
func ValidateData(schema *jsonschema.Schema, data json.RawMessage) []DataError {
	errs, err := ValidateDataWithin(schema, data, nil)
	if err != nil {
		return []DataError{{Pointer: "", Message: err.Error()}}
	}
	return errs
}

// ValidateDataWithin is ValidateData within a validation budget: data whose
// validation could take more than MaxValidationSteps, or more than is left
// of the request's budget b (nil: none), is refused before the validator
// starts with an error matching ErrValidationBudget; otherwise its steps are
// taken from b.
func ValidateDataWithin(schema *jsonschema.Schema, data json.RawMessage, b *Budget) ([]DataError, error) {
	doc, err := jsonvalue.Decode(data)
	if err != nil {
		return []DataError{{Pointer: "", Message: "data is not valid JSON: " + err.Error()}}, nil
	}
	return ValidateValueWithin(schema, doc, b)
}

// ValidateValueWithin is ValidateDataWithin on data already decoded by
// jsonvalue.Decode, for a caller that needs the decoded value too (the
// publisher canonicalizes it for the content hash). It does not change doc.
func ValidateValueWithin(schema *jsonschema.Schema, doc any, b *Budget) ([]DataError, error) {
	// Numbers out of bounds are refused before the validator sees them:
	// it would panic on some and spend seconds on others.
	if errs := numberErrors(doc); len(errs) > 0 {
		return errs, nil
	}
	if err := checkValidationBudget(schema, doc, b); err != nil {
		return nil, err
	}
	return validationErrors(validateSafely(schema, doc)), nil
}

// validationErrors lists the failures in the validator's answer err.
func validationErrors(err error) []DataError {
	if err == nil {
		return nil
	}
	if p, ok := err.(validatorPanic); ok {
		return []DataError{{Pointer: "", Message: p.Error()}}
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []DataError{{Pointer: "", Message: err.Error()}}
	}
	return flatten(verr)
}

// validatorPanic is a panic of the JSON Schema validator, recovered.
type validatorPanic struct{ value any }

func (p validatorPanic) Error() string {
	return fmt.Sprintf("data could not be validated against the schema: %v", p.value)
}

// validateSafely validates doc, turning a panic inside the validator into a
// validatorPanic: event data is outside input and must never crash the
// process that checks it.
func validateSafely(schema *jsonschema.Schema, doc any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = validatorPanic{r}
		}
	}()
	return schema.Validate(doc)
}

// flatten lists the leaf errors of a validation error tree, with their
// instance locations as JSON pointers, sorted and without repeats.
func flatten(root *jsonschema.ValidationError) []DataError {
	var out []DataError
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			out = append(out, DataError{
				Pointer: jsonPointer(e.InstanceLocation),
				Message: trimSchemaURL(e.ErrorKind.LocalizedString(englishPrinter)),
			})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(root)
	slices.SortFunc(out, func(a, b DataError) int {
		if c := strings.Compare(a.Pointer, b.Pointer); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return slices.Compact(out)
}

// jsonPointer builds an RFC 6901 pointer from reference tokens.
func jsonPointer(tokens []string) string {
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		sb.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return sb.String()
}

// decodeJSON decodes exactly one JSON value, keeping numbers exact.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if err := expectEOF(dec); err != nil {
		return nil, err
	}
	return v, nil
}

// expectEOF fails when the decoder has anything but white space left.
func expectEOF(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// jsonDepth returns the deepest nesting of objects and arrays in raw, which
// must be exactly one JSON value.
func jsonDepth(raw []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // a number beyond float64 is not a syntax error
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return deepest, expectEOF(dec)
		}
	}
}
