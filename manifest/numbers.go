package manifest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Bounds on a JSON number, in event data and in a dataSchema. The JSON Schema
// validator turns every number it compares into an exact fraction: one with
// an exponent of a million or more makes it panic, and a slightly smaller
// one costs tens of milliseconds. Numbers within these bounds cost
// microseconds; they reach well past float64 (about ±1.8e308, 5e-324).
const (
	// MaxNumberExponent bounds the exponent written after "e" or "E", in
	// either direction.
	MaxNumberExponent = 400
	// MaxNumberDigits bounds the digits written before the exponent, before
	// and after the decimal point together.
	MaxNumberDigits = 400
)

// maxNumberErrors is how many refused numbers one value reports; the walk
// stops there.
const maxNumberErrors = 10

// numberProblem returns what is wrong with a JSON number literal, or "" when
// it is within the bounds. s must be a valid JSON number (as a json.Number
// from a decoder is).
func numberProblem(s string) string {
	mantissa, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	digits := 0
	for i := 0; i < len(mantissa); i++ {
		if c := mantissa[i]; c >= '0' && c <= '9' {
			digits++
		}
	}
	if digits > MaxNumberDigits {
		return fmt.Sprintf("number %s has %d digits; at most %d are accepted", shortNumber(s), digits, MaxNumberDigits)
	}
	if !hasExp {
		return ""
	}
	exp = strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")
	// Checking the length first keeps a huge exponent from being converted.
	if n, err := strconv.Atoi(exp); len(exp) > 6 || (exp != "" && err != nil) || n > MaxNumberExponent {
		return fmt.Sprintf("number %s is out of range: its exponent must be between -%d and %d",
			shortNumber(s), MaxNumberExponent, MaxNumberExponent)
	}
	return ""
}

// shortNumber shortens a number literal for a message.
func shortNumber(s string) string {
	const keep = 24
	if len(s) <= keep {
		return s
	}
	return s[:keep] + "…"
}

// numberErrors walks a decoded JSON value (numbers as json.Number) and
// returns a DataError for each number out of bounds, at most
// maxNumberErrors of them, in the order of their pointers.
func numberErrors(v any) []DataError {
	if !anyNumberProblem(v) {
		return nil // the common case, without the sorted walk's paths
	}
	var out []DataError
	var path []string
	var walk func(v any)
	walk = func(v any) {
		if len(out) >= maxNumberErrors {
			return
		}
		switch v := v.(type) {
		case json.Number:
			if msg := numberProblem(string(v)); msg != "" {
				out = append(out, DataError{Pointer: jsonPointer(path), Message: msg})
			}
		case []any:
			for i, e := range v {
				path = append(path, strconv.Itoa(i))
				walk(e)
				path = path[:len(path)-1]
			}
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				path = append(path, k)
				walk(v[k])
				path = path[:len(path)-1]
			}
		}
	}
	walk(v)
	return out
}

// anyNumberProblem reports whether numberErrors would find anything in v.
func anyNumberProblem(v any) bool {
	switch v := v.(type) {
	case json.Number:
		return numberProblem(string(v)) != ""
	case []any:
		for _, e := range v {
			if anyNumberProblem(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range v {
			if anyNumberProblem(e) {
				return true
			}
		}
	}
	return false
}
