package publish

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxLineBytes is the longest NDJSON line ReadNDJSON reads: the default event
// limit plus room for the fields around the data. A Publisher reading a
// stream uses its own MaxEventBytes plus the same margin.
const MaxLineBytes = DefaultMaxEventBytes + lineMargin

const lineMargin = 64 << 10

// ndjsonLine is one line of an NDJSON file: the fields of `starter publish`.
type ndjsonLine struct {
	ID      string          `json:"id"`
	App     string          `json:"app"`
	Type    string          `json:"type"`
	Version int             `json:"version"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

// ReadNDJSON reads one JSON object per line (fields id, app, type, version,
// subject, data; any other field is refused) and calls fn for each non-blank
// line with its 1-based line number. A line that cannot be read gets a
// *Rejection instead of a request: data_invalid for malformed JSON, unknown
// fields or a value that is not an object, payload_too_large for a line over
// MaxLineBytes. Such a line never stops the reading; an error returned by fn
// does, and ReadNDJSON returns it. Other errors come from reading r.
func ReadNDJSON(r io.Reader, fn func(line int, req Request, err error) error) error {
	return readNDJSON(r, MaxLineBytes, fn)
}

func readNDJSON(r io.Reader, maxLine int, fn func(line int, req Request, err error) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	for lineNo := 1; ; lineNo++ {
		buf = buf[:0]
		tooLong, eof := false, false
		for {
			chunk, err := br.ReadSlice('\n')
			// Keep up to two bytes over the limit: room for a "\r\n" ending.
			if !tooLong && len(buf)+len(chunk) <= maxLine+2 {
				buf = append(buf, chunk...)
			} else {
				tooLong = true
			}
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				eof = true
				break
			}
			return fmt.Errorf("read line %d: %w", lineNo, err)
		}
		line := bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte("\n")), []byte("\r"))
		if tooLong || len(line) > maxLine {
			rej := &Rejection{Code: CodePayloadTooLarge,
				Message: fmt.Sprintf("line %d is longer than %d bytes", lineNo, maxLine)}
			if err := fn(lineNo, Request{}, rej); err != nil {
				return err
			}
		} else if len(bytes.TrimSpace(line)) > 0 {
			req, err := parseLine(line)
			if err != nil {
				err = &Rejection{Code: CodeDataInvalid, Message: fmt.Sprintf("line %d: %v", lineNo, err)}
			}
			if err := fn(lineNo, req, err); err != nil {
				return err
			}
		}
		if eof {
			return nil
		}
	}
}

// parseLine decodes one NDJSON line into a request.
func parseLine(line []byte) (Request, error) {
	trimmed := bytes.TrimSpace(line)
	if trimmed[0] != '{' {
		return Request{}, errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	var l ndjsonLine
	if err := dec.Decode(&l); err != nil {
		return Request{}, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Request{}, errors.New("invalid JSON: unexpected data after the object")
	}
	return Request{ID: l.ID, App: l.App, Type: l.Type, Version: l.Version, Subject: l.Subject, Data: l.Data}, nil
}
