//go:build !go1.27

package jsonvalue

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// Decode decodes raw, which must hold exactly one JSON value (white space
// around it allowed).
func Decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}
