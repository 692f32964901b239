// Package envelope writes the CloudEvents 1.0 envelope that Herald stores and
// delivers, and the content hash that makes re-publishing idempotent. Both
// publishing paths use it: an app's event (package publish) and Herald's own
// operational events (package store), so the two cannot drift apart.
package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"herald/internal/jsonvalue"
)

// TimeLayout is how the envelope's time is written: RFC 3339 in UTC with
// exactly nine fractional digits, so an envelope's size does not depend on
// the instant.
const TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// Envelope holds the fields of a CloudEvents 1.0 structured event.
type Envelope struct {
	ID      string
	App     string // the source is "app:" + App
	Type    string
	Subject string
	Time    time.Time
	Version int    // dataversion
	Data    []byte // compact JSON, written as it is
	// TraceParent and TraceState are the publish span's W3C trace context,
	// written as the extension attributes of the CloudEvents distributed
	// tracing extension when not empty.
	TraceParent, TraceState string
}

// Encode writes the envelope as compact JSON with a fixed field order:
// specversion, id, source, type, subject, time, datacontenttype,
// dataversion, traceparent and tracestate (when present), data. Strings
// keep <, > and & readable.
func (e Envelope) Encode() []byte {
	var b bytes.Buffer
	b.Grow(len(e.Data) + len(e.Subject) + len(e.Type) + 256)
	b.WriteString(`{"specversion":"1.0","id":`)
	b.Write(appendString(b.AvailableBuffer(), e.ID))
	b.WriteString(`,"source":`)
	b.Write(appendString(b.AvailableBuffer(), "app:"+e.App))
	b.WriteString(`,"type":`)
	b.Write(appendString(b.AvailableBuffer(), e.Type))
	b.WriteString(`,"subject":`)
	b.Write(appendString(b.AvailableBuffer(), e.Subject))
	b.WriteString(`,"time":"`)
	b.WriteString(e.Time.UTC().Format(TimeLayout))
	b.WriteString(`","datacontenttype":"application/json","dataversion":`)
	b.WriteString(strconv.Itoa(e.Version))
	if e.TraceParent != "" {
		b.WriteString(`,"traceparent":`)
		b.Write(appendString(b.AvailableBuffer(), e.TraceParent))
		if e.TraceState != "" {
			b.WriteString(`,"tracestate":`)
			b.Write(appendString(b.AvailableBuffer(), e.TraceState))
		}
	}
	b.WriteString(`,"data":`)
	b.Write(e.Data)
	b.WriteByte('}')
	return b.Bytes()
}

// ContentHash identifies an event's content for idempotent re-publishing:
// SHA-256 over app, type, version, subject and the canonical data (from
// Canonical). The time is left out, so retrying a publish without an
// explicit time finds the same content.
func ContentHash(app, typ string, version int, subject string, canonicalData []byte) string {
	sum := sha256.Sum256(hashDoc(app, typ, version, subject, canonicalData))
	return hex.EncodeToString(sum[:])
}

// Canonical rewrites valid JSON (exactly one value: anything but white
// space after it is an error) with object keys sorted and no white space,
// keeping numbers as written and <, > and & readable, so equal data hashes
// equally whatever its formatting.
func Canonical(data []byte) ([]byte, error) {
	v, err := jsonvalue.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("canonicalize data: %w", err)
	}
	return CanonicalValue(v)
}

// CanonicalValue is Canonical for data already decoded by jsonvalue.Decode.
func CanonicalValue(v any) ([]byte, error) {
	return appendCanonical(nil, v)
}

// Data encodes v (an operational event's payload, say) as canonical JSON:
// what Encode takes as Data and ContentHash as canonicalData.
func Data(v any) ([]byte, error) {
	raw, err := marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode data: %w", err)
	}
	return Canonical(raw)
}

// marshal is json.Marshal that leaves <, > and & readable.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
