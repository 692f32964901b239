package publish

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// TimeLayout is how the envelope's time is written: RFC 3339 in UTC with
// exactly nine fractional digits, so an envelope's size does not depend on
// the instant.
const TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// envelope holds the fields of a CloudEvents 1.0 structured event.
type envelope struct {
	ID      string
	App     string
	Type    string
	Subject string
	Time    time.Time
	Version int
	Data    []byte // compact JSON
	// TraceParent and TraceState are the publish span's W3C trace context,
	// written as the extension attributes of the CloudEvents distributed
	// tracing extension when not empty.
	TraceParent, TraceState string
}

// encode writes the envelope as compact JSON with a fixed field order:
// specversion, id, source, type, subject, time, datacontenttype,
// dataversion, traceparent and tracestate (when present), data.
func (e envelope) encode() []byte {
	var b bytes.Buffer
	b.Grow(len(e.Data) + len(e.Subject) + len(e.Type) + 256)
	b.WriteString(`{"specversion":"1.0","id":`)
	writeJSONString(&b, e.ID)
	b.WriteString(`,"source":`)
	writeJSONString(&b, "app:"+e.App)
	b.WriteString(`,"type":`)
	writeJSONString(&b, e.Type)
	b.WriteString(`,"subject":`)
	writeJSONString(&b, e.Subject)
	b.WriteString(`,"time":"`)
	b.WriteString(e.Time.UTC().Format(TimeLayout))
	b.WriteString(`","datacontenttype":"application/json","dataversion":`)
	b.WriteString(strconv.Itoa(e.Version))
	if e.TraceParent != "" {
		b.WriteString(`,"traceparent":`)
		writeJSONString(&b, e.TraceParent)
		if e.TraceState != "" {
			b.WriteString(`,"tracestate":`)
			writeJSONString(&b, e.TraceState)
		}
	}
	b.WriteString(`,"data":`)
	b.Write(e.Data)
	b.WriteByte('}')
	return b.Bytes()
}

// writeJSONString writes s as a JSON string, leaving <, > and & readable.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes; writing to a Buffer cannot fail
	b.Truncate(b.Len() - 1)
}

// contentHash identifies an event's content for idempotent re-publishing:
// SHA-256 over app, type, version, subject and the canonical data. The time
// is left out, so retrying a publish without an explicit time finds the same
// content.
func contentHash(app, typ string, version int, subject string, canonicalData []byte) string {
	// canonicalData comes from canonicalJSON, so marshalling cannot fail.
	doc, _ := json.Marshal([]any{app, typ, version, subject, json.RawMessage(canonicalData)})
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:])
}

// canonicalJSON rewrites valid JSON with object keys sorted and no white
// space, keeping numbers as written, so equal data hashes equally whatever
// its formatting.
func canonicalJSON(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonicalize data: %w", err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("canonicalize data: %w", err)
	}
	return out, nil
}
