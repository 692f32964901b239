package cli

import (
	"errors"
	"fmt"
	"strings"

	"herald/manifest"
	"herald/publish"
	"herald/store"
)

// usageError is a malformed request: an unknown command or flag, missing or
// surplus arguments, or a flag value that cannot be used.
type usageError struct {
	// cmd is the top-level command the request was for, whose usage is
	// printed after the message; empty when the command was not recognised.
	cmd string
	// msg names the command path itself ("apps apply: missing PATH").
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// invalidError is a well-formed request Herald refuses: an unknown id, a
// state change that is not allowed. It exits with ExitInvalid.
type invalidError struct{ err error }

func (e *invalidError) Error() string { return e.err.Error() }
func (e *invalidError) Unwrap() error { return e.err }

func invalidf(format string, args ...any) error {
	return &invalidError{err: fmt.Errorf(format, args...)}
}

// reportedError ends a command whose outcome was already written out (a
// rejected event, a list of manifest problems, help): Run exits with code and
// prints nothing more.
type reportedError struct{ code int }

func (e *reportedError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode maps a command's error to starter's exit code.
func exitCode(err error) int {
	var (
		reported    *reportedError
		usage       *usageError
		invalid     *invalidError
		state       *store.StateError
		badManifest *manifest.ValidationError
		breaking    *store.BreakingChangeError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &reported):
		return reported.code
	case errors.As(err, &usage), errors.As(err, &invalid), errors.As(err, &state),
		errors.As(err, &badManifest), errors.As(err, &breaking), errors.Is(err, store.ErrNotFound),
		errors.Is(err, store.ErrReservedApp):
		return ExitInvalid
	}
	if _, ok := publish.IsRejection(err); ok {
		return ExitInvalid
	}
	return ExitError
}

// finish reports err on stderr (unless it was reported already) and returns
// the exit code.
func (inv *invocation) finish(err error) int {
	code := exitCode(err)
	var (
		reported *reportedError
		usage    *usageError
	)
	switch {
	case err == nil, errors.As(err, &reported):
	case errors.As(err, &usage):
		fmt.Fprintf(inv.stderr, "starter: %s\n", usage.msg)
		if c, ok := lookupCommand(usage.cmd); ok && c.run != nil {
			fmt.Fprintf(inv.stderr, "usage: starter %s\n", strings.Join(c.synopsis, "\n       starter "))
		} else {
			fmt.Fprintln(inv.stderr, "Run 'starter help' for the list of commands.")
		}
	case store.IsNoSchema(err):
		fmt.Fprintf(inv.stderr, "starter: %v\nThe database has no Herald schema yet: run starter migrate (or start the worker) first.\n", err)
	default:
		fmt.Fprintf(inv.stderr, "starter: %v\n", err)
	}
	return code
}
