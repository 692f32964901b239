package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"herald/publish"
)

// Media types of a request body.
const (
	mediaJSON   = "application/json"
	mediaNDJSON = "application/x-ndjson"
)

// eventIn is one event of a request: the fields of `starter publish`, app
// optional (the token's app).
type eventIn struct {
	ID      string          `json:"id"`
	App     string          `json:"app"`
	Type    string          `json:"type"`
	Version int             `json:"version"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

// item is one event read from a request: a publish request, or a rejection
// when it could not be read. line is its NDJSON line (0 for JSON).
type item struct {
	req  publish.Request
	rej  *publish.Rejection
	line int
}

// errBody is a request body that cannot be read as events at all; status
// and code say how to answer.
type errBody struct {
	status int
	code   string
	msg    string
}

func (e *errBody) Error() string { return e.msg }

func bodyErr(status int, code, format string, args ...any) *errBody {
	return &errBody{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// readEvents reads the events of a request whose body is already limited by
// http.MaxBytesReader. batch reports whether the body was a list (JSON array
// or NDJSON) rather than one object. Reading is streamed an event at a
// time and stops at the byte limit, at a JSON event object over
// MaxObjectBytes (payload_too_large; an NDJSON line over it is refused
// alone) and after MaxBatchEvents events, so an oversized body is never
// read to its end nor held whole.
func readEvents(r *http.Request, maxEvents int) (items []item, batch bool, err error) {
	media, _, perr := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if perr != nil {
		media = ""
	}
	switch media {
	case mediaJSON:
		items, batch, err = readJSON(r.Body, maxEvents)
	case mediaNDJSON:
		items, err = readNDJSON(r.Body, maxEvents)
		batch = true
	default:
		return nil, false, bodyErr(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
			"Content-Type must be %s (one event or an array of events) or %s (one event per line)", mediaJSON, mediaNDJSON)
	}
	if errors.Is(err, errObjectTooLarge) {
		return nil, false, bodyErr(http.StatusRequestEntityTooLarge, publish.CodePayloadTooLarge,
			"an event object of the body is larger than %d bytes (an encoded event may be at most %d)",
			MaxObjectBytes, publish.DefaultMaxEventBytes)
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, false, bodyErr(http.StatusRequestEntityTooLarge, publish.CodePayloadTooLarge,
			"the request body is larger than %d bytes", tooBig.Limit)
	}
	if err != nil {
		return nil, false, err
	}
	if len(items) == 0 {
		return nil, false, bodyErr(http.StatusBadRequest, publish.CodeDataInvalid, "the request holds no event")
	}
	return items, batch, nil
}

func tooManyEvents(maxEvents int) *errBody {
	return bodyErr(http.StatusRequestEntityTooLarge, publish.CodePayloadTooLarge,
		"a request holds at most %d events", maxEvents)
}

// MaxObjectBytes caps one event object of a JSON body, and a JSON body
// that is one object: the event limit plus room for the fields around the
// data, as for an NDJSON line. Reading stops there, so an oversized event
// is refused having cost that much memory, not its size.
const MaxObjectBytes = publish.MaxLineBytes

// errObjectTooLarge is an event object of a JSON body over MaxObjectBytes.
var errObjectTooLarge = errors.New("event object too large")

// objectReader lets a JSON decoder read at most up to an absolute offset of
// the body, which readJSON moves on before each event object: the decoder
// only reads when its value is incomplete, so reading past the offset means
// the object being decoded is over its budget.
type objectReader struct {
	r          io.Reader
	pos, limit int64
}

func (o *objectReader) Read(p []byte) (int, error) {
	if o.pos >= o.limit {
		return 0, errObjectTooLarge
	}
	if int64(len(p)) > o.limit-o.pos {
		p = p[:o.limit-o.pos]
	}
	n, err := o.r.Read(p)
	o.pos += int64(n)
	return n, err
}

// readJSON reads one event object or an array of them, one object at a
// time, each within MaxObjectBytes.
func readJSON(body io.Reader, maxEvents int) ([]item, bool, error) {
	br := bufio.NewReader(body)
	first, err := firstByte(br)
	if err != nil {
		return nil, false, err
	}
	or := &objectReader{r: br}
	dec := json.NewDecoder(or)
	next := func() { or.limit = dec.InputOffset() + MaxObjectBytes }
	switch first {
	case '{':
		next()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false, malformed(err)
		}
		next()
		if err := expectEOF(dec); err != nil {
			return nil, false, err
		}
		return []item{parseEvent(raw, 0)}, false, nil
	case '[':
		next()
		if _, err := dec.Token(); err != nil {
			return nil, false, malformed(err)
		}
		var items []item
		for next(); dec.More(); next() {
			if len(items) == maxEvents {
				return nil, true, tooManyEvents(maxEvents)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, true, malformed(err)
			}
			items = append(items, parseEvent(raw, len(items)))
		}
		if _, err := dec.Token(); err != nil {
			return nil, true, malformed(err)
		}
		next()
		if err := expectEOF(dec); err != nil {
			return nil, true, err
		}
		return items, true, nil
	case 0:
		return nil, false, nil
	default:
		return nil, false, bodyErr(http.StatusBadRequest, publish.CodeDataInvalid,
			"the body must be a JSON object (one event) or array (events)")
	}
}

// firstByte returns the first byte after white space without consuming it,
// or 0 for an empty body.
func firstByte(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if b != ' ' && b != '\t' && b != '\n' && b != '\r' {
			return b, br.UnreadByte()
		}
	}
}

// malformed turns a decoding error into the answer: a read error (the
// byte limit among them) stays as it is, anything else is malformed JSON.
func malformed(err error) error {
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntax) || errors.As(err, &typeErr) || errors.Is(err, io.ErrUnexpectedEOF) {
		return bodyErr(http.StatusBadRequest, publish.CodeDataInvalid, "the body is not valid JSON: %v", err)
	}
	return err
}

func expectEOF(dec *json.Decoder) error {
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return malformed(err)
		}
		return bodyErr(http.StatusBadRequest, publish.CodeDataInvalid, "the body has data after its JSON value")
	}
	return nil
}

// parseEvent decodes one event of a JSON body; a malformed one becomes a
// data_invalid rejection of that event alone.
func parseEvent(raw json.RawMessage, index int) item {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var e eventIn
	if err := dec.Decode(&e); err != nil {
		return item{rej: &publish.Rejection{Code: publish.CodeDataInvalid,
			Message: fmt.Sprintf("event %d is not a valid event object: %v", index, err)}}
	}
	return item{req: publish.Request{ID: e.ID, App: e.App, Type: e.Type, Version: e.Version, Subject: e.Subject, Data: e.Data}}
}

// readNDJSON reads one event per line with the publisher's NDJSON reader.
func readNDJSON(body io.Reader, maxEvents int) ([]item, error) {
	var items []item
	err := publish.ReadNDJSON(body, func(line int, req publish.Request, err error) error {
		if len(items) == maxEvents {
			return tooManyEvents(maxEvents)
		}
		it := item{req: req, line: line}
		if err != nil {
			rej, ok := publish.IsRejection(err)
			if !ok {
				return err
			}
			it.rej = rej
		}
		items = append(items, it)
		return nil
	})
	return items, err
}
