package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// isTerminal reports whether w is a terminal (a character device), the only
// place a progress bar belongs.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// progressRedraw is the least time between two drawings of the bar.
const progressRedraw = 100 * time.Millisecond

// progressWidth is the number of cells of the bar itself.
const progressWidth = 30

// progressBar draws the progress of a file publish on one terminal line,
// redrawn in place with a carriage return.
type progressBar struct {
	w     io.Writer
	total int64 // bytes of the input; zero when unknown (stdin, a pipe)
	read  *countingReader
	now   func() time.Time
	last  time.Time
	drawn bool
}

func newProgressBar(w io.Writer, total int64, read *countingReader) *progressBar {
	return &progressBar{w: w, total: total, read: read, now: time.Now}
}

// update redraws the bar after a batch, at most every progressRedraw.
func (b *progressBar) update(done, rejected int) {
	now := b.now()
	if b.drawn && now.Sub(b.last) < progressRedraw {
		return
	}
	b.last, b.drawn = now, true
	fmt.Fprint(b.w, "\r"+b.render(done, rejected))
}

// render returns the bar's text: a bar and a percentage when the input size
// is known, the counts in any case.
func (b *progressBar) render(done, rejected int) string {
	counts := fmt.Sprintf("%s, %d rejected", plural(done, "line"), rejected)
	if b.total <= 0 {
		return counts
	}
	frac := float64(b.read.n.Load()) / float64(b.total)
	frac = min(max(frac, 0), 1)
	filled := int(frac * progressWidth)
	return fmt.Sprintf("[%s%s] %3d%%  %s",
		strings.Repeat("#", filled), strings.Repeat(".", progressWidth-filled), int(frac*100), counts)
}

// clear erases the bar's line, so that what follows starts on a clean one.
func (b *progressBar) clear() {
	if b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
}

// countBar draws the progress of a job of known size (the events of a
// replay window) in the style of progressBar: a bar, a percentage and the
// count, redrawn in place.
type countBar struct {
	w     io.Writer
	total int
	noun  string
	now   func() time.Time
	last  time.Time
	drawn bool
}

func newCountBar(w io.Writer, total int, noun string) *countBar {
	return &countBar{w: w, total: total, noun: noun, now: time.Now}
}

// update redraws the bar with done of total, at most every progressRedraw
// (and always at the end).
func (b *countBar) update(done int) {
	now := b.now()
	if b.drawn && done < b.total && now.Sub(b.last) < progressRedraw {
		return
	}
	b.last, b.drawn = now, true
	fmt.Fprint(b.w, "\r"+b.render(done))
}

func (b *countBar) render(done int) string {
	frac := 1.0
	if b.total > 0 {
		frac = min(max(float64(done)/float64(b.total), 0), 1)
	}
	filled := int(frac * progressWidth)
	return fmt.Sprintf("[%s%s] %3d%%  %d/%d %s",
		strings.Repeat("#", filled), strings.Repeat(".", progressWidth-filled), int(frac*100), done, b.total, b.noun)
}

// clear erases the bar's line.
func (b *countBar) clear() {
	if b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
}
