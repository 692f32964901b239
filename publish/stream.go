package publish

import (
	"context"
	"fmt"
	"io"

	"herald/manifest"
)

// DefaultBatchSize is the batch size PublishStream uses when given none.
const DefaultBatchSize = 500

// MaxSummaryRejections is how many line rejections a Summary lists; further
// ones are only counted.
const MaxSummaryRejections = 1000

// LineRejection is a refused line of an NDJSON stream.
type LineRejection struct {
	Line    int                  `json:"line"`
	Code    string               `json:"code"`
	Message string               `json:"message"`
	Errors  []manifest.DataError `json:"errors,omitempty"`
}

// Summary counts what PublishStream did with the lines it settled.
type Summary struct {
	// Lines counts the non-blank lines settled (accepted or rejected).
	Lines int `json:"lines"`
	// Accepted counts accepted lines, duplicates included.
	Accepted int `json:"accepted"`
	// Duplicates counts lines whose id and content were already accepted.
	Duplicates int `json:"duplicates"`
	// Deprecated counts accepted lines of versions marked deprecated.
	Deprecated int `json:"deprecated"`
	// Rejected counts every refused line.
	Rejected int `json:"rejected"`
	// Rejections lists the first MaxSummaryRejections refused lines.
	Rejections []LineRejection `json:"rejections,omitempty"`
}

func (s *Summary) reject(line int, r *Rejection) {
	s.Lines++
	s.Rejected++
	if len(s.Rejections) < MaxSummaryRejections {
		s.Rejections = append(s.Rejections, LineRejection{Line: line, Code: r.Code, Message: r.Message, Errors: r.Errors})
	}
}

// PublishStream publishes an NDJSON stream (see ReadNDJSON) in batches of
// batchSize lines (zero or less: DefaultBatchSize), each batch one
// PublishBatch call. Lines may be as long as MaxEventBytes plus 64 KiB.
// Refused lines, unreadable ones included, are recorded like any rejection
// and listed in the summary; they never stop the stream. progress, when not
// nil, is called after each batch with the lines settled and rejected so far.
// An error (reading r, the database, ctx) stops the stream; the summary then
// covers the batches settled before it.
func (p *Publisher) PublishStream(ctx context.Context, r io.Reader, batchSize int, progress func(done, rejected int)) (Summary, error) {
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	var sum Summary
	batch := make([]Request, 0, batchSize)
	lines := make([]int, 0, batchSize)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		outs, err := p.PublishBatch(ctx, batch)
		if err != nil {
			return err
		}
		for i, o := range outs {
			if o.Rejection != nil {
				sum.reject(lines[i], o.Rejection)
				continue
			}
			sum.Lines++
			sum.Accepted++
			if o.Result.Duplicate {
				sum.Duplicates++
			}
			if o.Result.Deprecated {
				sum.Deprecated++
			}
		}
		batch, lines = batch[:0], lines[:0]
		if progress != nil {
			progress(sum.Lines, sum.Rejected)
		}
		return nil
	}
	err := readNDJSON(r, p.maxEventBytes+lineMargin, func(line int, req Request, err error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err != nil {
			rej, ok := IsRejection(err)
			if !ok {
				return err
			}
			sum.reject(line, rej)
			p.record(ctx, req, rej)
			return nil
		}
		batch = append(batch, req)
		lines = append(lines, line)
		if len(batch) >= batchSize {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return sum, fmt.Errorf("publish stream: %w", err)
	}
	return sum, nil
}
