// Package jsonvalue decodes one JSON value into Go's generic form: the
// map[string]any, []any, string, json.Number, bool and nil values that
// encoding/json's Decoder gives with UseNumber, the same values for the same
// text, without reflection. Event data is decoded on every publish (for its
// schema and its content hash), and the reflective decoder was most of the
// publisher's CPU for an event.
//
// Built with Go 1.27 or later it reads tokens with encoding/json/jsontext;
// with Go 1.26 (go.mod's minimum, for apps that import Herald's publisher)
// it falls back to encoding/json's Decoder itself.
package jsonvalue
