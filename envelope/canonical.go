package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// The writers here produce exactly the bytes encoding/json wrote for the
// envelope, the canonical data and the content hash before they were
// written by hand (canonical_test.go holds those writers and compares):
// a stored hash must match a re-publish of the same content forever. The
// one exception is where encoding/json failed: the hash of data nested
// 10,000 levels deep (hashDoc). A string the fast path cannot write byte
// for byte is handed to encoding/json.

// plain reports whether encoding/json writes s as it is between quotes:
// printable ASCII without a quote or a backslash, and, when html (as
// json.Marshal escapes it), without <, > and &.
func plain(s string, html bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || (html && (c == '<' || c == '>' || c == '&')) {
			return false
		}
	}
	return true
}

// appendString appends s as a JSON string, leaving <, > and & readable.
func appendString(dst []byte, s string) []byte { return appendJSONString(dst, s, false) }

// appendJSONString appends s as encoding/json writes a string: with <, >
// and & escaped when html (as json.Marshal does), readable otherwise (as
// marshal does).
func appendJSONString(dst []byte, s string, html bool) []byte {
	if plain(s, html) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	var b []byte
	if html {
		b, _ = json.Marshal(s) // a string always encodes
	} else {
		b, _ = marshal(s)
	}
	return append(dst, b...)
}

// appendCanonical appends v, a value of jsonvalue.Decode, with object
// names sorted byte-wise, no white space, numbers as written and <, > and
// & readable.
func appendCanonical(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if v {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		return appendString(dst, v), nil
	case json.Number:
		if !isNumber(string(v)) {
			return nil, fmt.Errorf("invalid number literal %q", string(v))
		}
		return append(dst, v...), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendCanonical(dst, e); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		names := make([]string, 0, len(v))
		for name := range v {
			names = append(names, name)
		}
		slices.Sort(names)
		dst = append(dst, '{')
		for i, name := range names {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, name)
			dst = append(dst, ':')
			var err error
			if dst, err = appendCanonical(dst, v[name]); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	default:
		return nil, fmt.Errorf("%T is not a decoded JSON value", v)
	}
}

// hashDoc is the document ContentHash hashes: the JSON array [app, type,
// version, subject, data] as json.Marshal wrote it, which escapes <, > and
// & (in the data's strings too). It is written piece by piece, so it has
// a value for every input: json.Marshal of the whole array failed on data
// nested 10,000 levels deep (one level too many with the array around it),
// and the hash of its empty output made every such event's content equal.
func hashDoc(app, typ string, version int, subject string, canonicalData []byte) []byte {
	doc := make([]byte, 0, len(app)+len(typ)+len(subject)+len(canonicalData)+32)
	doc = append(doc, '[')
	doc = appendJSONString(doc, app, true)
	doc = append(doc, ',')
	doc = appendJSONString(doc, typ, true)
	doc = append(doc, ',')
	doc = strconv.AppendInt(doc, int64(version), 10)
	doc = append(doc, ',')
	doc = appendJSONString(doc, subject, true)
	doc = append(doc, ',')
	if bytes.ContainsAny(canonicalData, "<>&") {
		// Only inside strings: json.Marshal wrote them escaped.
		var b bytes.Buffer
		json.HTMLEscape(&b, canonicalData)
		doc = append(doc, b.Bytes()...)
	} else {
		doc = append(doc, canonicalData...)
	}
	return append(doc, ']')
}

// isNumber reports whether s is a JSON number literal (RFC 8259, section 6).
func isNumber(s string) bool {
	i := 0
	digits := func() bool {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	return i == len(s)
}
