//go:build go1.27

package jsonvalue

import (
	"bytes"
	"encoding/json"
	"encoding/json/jsontext"
	"errors"
	"fmt"
	"io"
	"sync"
)

// decoders reuses jsontext decoders between calls.
var decoders = sync.Pool{New: func() any { return new(jsontext.Decoder) }}

// options are encoding/json's (v1) reading rules: a name given twice keeps
// its last value, and invalid UTF-8 in a string becomes U+FFFD.
var options = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// Decode decodes raw, which must hold exactly one JSON value (white space
// around it allowed).
func Decode(raw []byte) (any, error) {
	d := decoders.Get().(*jsontext.Decoder)
	// From a bytes.Buffer the decoder reads raw in place, without a copy.
	d.Reset(bytes.NewBuffer(raw), options...)
	defer func() {
		d.Reset(new(bytes.Buffer)) // let go of raw
		decoders.Put(d)
	}()
	v, err := value(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

// value reads the next value from d.
func value(d *jsontext.Decoder) (any, error) {
	tok, err := d.ReadToken()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch tok.Kind() {
	case 'n':
		return nil, nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case '"':
		return tok.String(), nil
	case '0':
		return json.Number(tok.String()), nil
	case '{':
		m := map[string]any{}
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			key := name.String()
			v, err := value(d)
			if err != nil {
				return nil, err
			}
			m[key] = v
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, err
		}
		return m, nil
	case '[':
		a := []any{}
		for d.PeekKind() != ']' {
			v, err := value(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, err
		}
		return a, nil
	default:
		return nil, fmt.Errorf("unexpected JSON token %v", tok.Kind())
	}
}
