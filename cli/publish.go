package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"herald/manifest"
	"herald/publish"
)

// maxDataFileBytes caps what --data @FILE reads: one byte past the
// publisher's event limit. Data that long can never be accepted; the
// publisher refuses it as payload_too_large before parsing it, so reading
// the rest of the file would only spend memory.
const maxDataFileBytes = publish.DefaultMaxEventBytes + 1

// eventFlags are the flags of a single-event publish, which --file replaces.
var eventFlags = []string{"app", "type", "version", "subject", "data", "id"}

// acceptedJSON is the JSON answer to an accepted single-event publish.
type acceptedJSON struct {
	Accepted  bool   `json:"accepted"`
	ID        string `json:"id"`
	Seq       int64  `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	// Deprecated: the version is marked deprecated in its manifest; the
	// event was accepted all the same.
	Deprecated bool `json:"deprecated"`
}

// rejectedJSON is the JSON answer to a rejected single-event publish.
type rejectedJSON struct {
	Accepted bool                 `json:"accepted"`
	Code     string               `json:"code"`
	Message  string               `json:"message"`
	Errors   []manifest.DataError `json:"errors"`
}

// runPublish publishes one event from flags, or every line of an NDJSON file.
func runPublish(inv *invocation, args []string) error {
	fs := inv.newFlags("publish")
	var req publish.Request
	fs.StringVar(&req.App, "app", "", "the publishing app")
	fs.StringVar(&req.Type, "type", "", "the event type, <app>.<name>")
	fs.IntVar(&req.Version, "version", 0, "the declared version of the event")
	fs.StringVar(&req.Subject, "subject", "", "the subject key (what the event is about, e.g. person-42)")
	data := fs.String("data", "", "the event data as JSON, or @FILE to read it from a file (@- reads stdin)")
	fs.StringVar(&req.ID, "id", "", "the event id, a UUID (generated when not given; reuse it to publish idempotently)")
	file := fs.String("file", "", "publish one event per line of this NDJSON file ('-' reads stdin)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("publish", rest); err != nil {
		return err
	}
	set := setFlags(fs)
	if set["file"] {
		for _, name := range eventFlags {
			if set[name] {
				return usagef("publish", "publish: --file cannot be combined with --%s: each line carries its own fields", name)
			}
		}
		return publishFile(inv, *file)
	}
	if !anySet(set, eventFlags) {
		return usagef("publish", "publish: give the event with --app, --type, --version, --subject and --data, or a file with --file")
	}
	if req.Data, err = inv.readData(*data); err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := publish.New(st, publish.Options{Via: publish.ViaCLI}).Publish(inv.ctx, req)
	if rej, ok := publish.IsRejection(err); ok {
		return inv.reportRejection(rej)
	}
	if err != nil {
		return err
	}
	if res.Deprecated {
		fmt.Fprintf(inv.stderr, "warning: %s@%d is deprecated; the event was accepted, but publish a newer version when you can\n",
			req.Type, req.Version)
	}
	if inv.json {
		return writeJSON(inv.stdout, acceptedJSON{Accepted: true, ID: res.ID, Seq: res.Seq, Duplicate: res.Duplicate,
			Deprecated: res.Deprecated})
	}
	if res.Duplicate {
		fmt.Fprintf(inv.stdout, "already accepted: event %s (seq %d) has the same id and content; nothing new recorded\n", res.ID, res.Seq)
	} else {
		fmt.Fprintf(inv.stdout, "accepted: event %s (seq %d)\n", res.ID, res.Seq)
	}
	return nil
}

func anySet(set map[string]bool, names []string) bool {
	for _, n := range names {
		if set[n] {
			return true
		}
	}
	return false
}

// readData returns the --data value: the JSON itself, or the content of the
// file named after "@" ("@-" reads stdin).
func (inv *invocation) readData(value string) (json.RawMessage, error) {
	path, isFile := strings.CutPrefix(value, "@")
	if !isFile {
		return json.RawMessage(value), nil
	}
	if err := inv.act(); err != nil {
		return nil, err
	}
	var r io.Reader = inv.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, invalidf("read --data file: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxDataFileBytes))
	if err != nil {
		return nil, fmt.Errorf("read --data %s: %w", value, err)
	}
	return json.RawMessage(b), nil
}

// reportRejection prints a refused event and ends the command with
// ExitInvalid: on stdout as JSON, or as text on stderr.
func (inv *invocation) reportRejection(rej *publish.Rejection) error {
	if inv.json {
		if err := writeJSON(inv.stdout, rejectedJSON{Accepted: false, Code: rej.Code, Message: rej.Message,
			Errors: nonNil(rej.Errors)}); err != nil {
			return err
		}
		return &reportedError{code: ExitInvalid}
	}
	fmt.Fprintf(inv.stderr, "rejected: %s: %s\n", rej.Code, headline(rej.Message, rej.Errors))
	printDataErrors(inv.stderr, rej.Errors)
	return &reportedError{code: ExitInvalid}
}

// headline is the first line of a rejection: its message, or, when the
// schema violations follow one per line, their count (the message lists the
// same violations and would repeat them).
func headline(message string, errs []manifest.DataError) string {
	if len(errs) == 0 {
		return message
	}
	return fmt.Sprintf("the data does not match the declared schema (%s):", plural(len(errs), "violation"))
}

// printDataErrors prints each schema violation as "  /pointer: message".
func printDataErrors(w io.Writer, errs []manifest.DataError) {
	for _, e := range errs {
		p := e.Pointer
		if p == "" {
			p = "(root)"
		}
		fmt.Fprintf(w, "  %s: %s\n", p, e.Message)
	}
}

// publishFile publishes an NDJSON file line by line. Rejected lines are
// listed and do not stop the file; the command exits with ExitInvalid when
// any line was rejected.
func publishFile(inv *invocation, path string) error {
	if err := inv.act(); err != nil {
		return err
	}
	var in io.Reader = inv.stdin
	var size int64
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return invalidf("read --file: %w", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		in = f
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()

	counter := &countingReader{r: in}
	var progress func(done, rejected int)
	var bar *progressBar
	if isTerminal(inv.stderr) {
		bar = newProgressBar(inv.stderr, size, counter)
		progress = bar.update
	}
	sum, streamErr := publish.New(st, publish.Options{Via: publish.ViaCLI}).PublishStream(inv.ctx, counter, 0, progress)
	if bar != nil {
		bar.clear()
	}

	if inv.json {
		sum.Rejections = nonNil(sum.Rejections)
		if err := writeJSON(inv.stdout, sum); err != nil {
			return err
		}
	} else {
		printLineRejections(inv.stderr, sum)
		if sum.Deprecated > 0 {
			fmt.Fprintf(inv.stderr, "warning: %s of deprecated versions accepted; publish newer versions when you can (starter catalog)\n",
				plural(sum.Deprecated, "event"))
		}
		printSummary(inv.stdout, sum)
	}
	if streamErr != nil {
		return fmt.Errorf("stopped after %s: %w", plural(sum.Lines, "line"), streamErr)
	}
	if sum.Rejected > 0 {
		return &reportedError{code: ExitInvalid}
	}
	return nil
}

// linePrefix matches a "line N: " the reader may already have put in front
// of a message, so that it is not printed twice.
var linePrefix = regexp.MustCompile(`^line \d+: `)

// printLineRejections prints "line N: CODE: message" for every listed
// rejection, in line order, each with its data errors.
func printLineRejections(w io.Writer, sum publish.Summary) {
	rejs := append([]publish.LineRejection(nil), sum.Rejections...)
	sort.SliceStable(rejs, func(i, j int) bool { return rejs[i].Line < rejs[j].Line })
	for _, r := range rejs {
		fmt.Fprintf(w, "line %d: %s: %s\n", r.Line, r.Code, headline(linePrefix.ReplaceAllString(r.Message, ""), r.Errors))
		printDataErrors(w, r.Errors)
	}
	if n := sum.Rejected - len(sum.Rejections); n > 0 {
		fmt.Fprintf(w, "(%s more not listed)\n", plural(n, "rejected line"))
	}
}

// printSummary prints the totals of a file publish.
func printSummary(w io.Writer, sum publish.Summary) {
	accepted := fmt.Sprintf("%d accepted", sum.Accepted)
	if sum.Duplicates > 0 {
		accepted += fmt.Sprintf(" (%d already accepted before)", sum.Duplicates)
	}
	fmt.Fprintf(w, "%s: %s, %d rejected\n", plural(sum.Lines, "line"), accepted, sum.Rejected)
}
