package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// MaxManifestBytes is the largest manifest file accepted.
const MaxManifestBytes = 1 << 20

// maxConvertedBytes bounds the JSON a YAML manifest turns into, so that YAML
// aliases cannot expand a small file into a huge document.
const maxConvertedBytes = 4 * MaxManifestBytes

// Parse reads one manifest, JSON or YAML, and validates it. source names where
// the data came from, for messages, and is kept in Manifest.Source.
//
// A source ending in .yaml or .yml is read as YAML and one ending in .json as
// JSON; otherwise data starting with '{' is JSON and anything else YAML.
// Decoding is strict: unknown or repeated fields anywhere (except inside the
// free-form dataSchema and place) and data after the manifest object are
// refused. Every refusal is a *ValidationError listing all problems found.
//
// Parse strips trailing '/' characters from the endpoint, so that appending the
// delivery path never doubles it.
func Parse(source string, data []byte) (*Manifest, error) {
	return parse(source, data, false)
}

// ParseBuiltin is Parse for Herald's own manifest (app ReservedApp), which
// Parse refuses.
func ParseBuiltin(source string, data []byte) (*Manifest, error) {
	return parse(source, data, true)
}

func parse(source string, data []byte, builtin bool) (*Manifest, error) {
	fail := func(format string, args ...any) error {
		var ps problems
		ps.add("", format, args...)
		return ps.asError(source, "")
	}
	if len(data) > MaxManifestBytes {
		return nil, fail("manifest is larger than 1 MiB (%d bytes)", len(data))
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	if isYAML(source, data) {
		if n, err := yamlDocuments(data); err == nil && n > 1 {
			return nil, fail("the YAML holds more than one document; a manifest file holds one")
		}
		converted, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			return nil, fail("not valid YAML: %v", err)
		}
		if len(converted) > maxConvertedBytes {
			return nil, fail("manifest is larger than %d MiB once YAML aliases are expanded", maxConvertedBytes>>20)
		}
		data = converted
	}
	if _, err := decodeJSON(data); err != nil {
		return nil, fail("not valid JSON%s: %v", syntaxPosition(data, err), err)
	}

	m := &Manifest{Source: source, builtin: builtin}
	var ps problems
	if !m.decode(data, &ps) {
		return nil, ps.asError(source, "")
	}
	m.validate(&ps)
	if err := ps.asError(source, appForMessages(m.App)); err != nil {
		return nil, err
	}
	return m, nil
}

// syntaxPosition returns " at line L, column C" for a JSON syntax error, or "".
func syntaxPosition(data []byte, err error) string {
	var syn *json.SyntaxError
	if !errors.As(err, &syn) || syn.Offset < 1 || syn.Offset > int64(len(data)) {
		return ""
	}
	before := data[:syn.Offset-1]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf(" at line %d, column %d", line, col)
}

// isYAML decides whether data is YAML, by the source's extension first.
func isYAML(source string, data []byte) bool {
	switch strings.ToLower(filepath.Ext(source)) {
	case ".yaml", ".yml":
		return true
	case ".json":
		return false
	}
	return !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{"))
}

// yamlDocuments counts the documents in a YAML stream, stopping at two.
func yamlDocuments(data []byte) (int, error) {
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	n := 0
	for n < 2 {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			break
		} else if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// appForMessages returns app if it is a valid app id, else "", so that an
// error never quotes a long or garbled value in its heading.
func appForMessages(app string) string {
	if ValidAppID(app) {
		return app
	}
	return ""
}

// truncate cuts s to at most n runes for a message.
func truncate(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i] + "…"
		}
		n--
	}
	return s
}

// quote quotes a value for a message, cutting it to a readable length.
func quote(s string) string { return strconv.Quote(truncate(s, 100)) }
