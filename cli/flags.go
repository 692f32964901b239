package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlags returns the flag set of cmd ("apps apply"), with the --json flag
// every command takes.
func (inv *invocation) newFlags(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by finish, help by parseFlags
	fs.BoolVar(&inv.json, "json", inv.json, "print JSON instead of text")
	return fs
}

// parseFlags parses args with fs and returns the positional arguments. Flags
// may come before, between or after positional arguments (the flag package
// alone stops at the first positional one); everything after "--" is
// positional. -h or --help prints the command's usage and ends the command.
func (inv *invocation) parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	top := topCommand(fs.Name())
	positional := []string{}
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			inv.printFlagsHelp(fs)
			return nil, &reportedError{code: ExitOK}
		}
		if err != nil {
			return nil, usagef(top, "%s: %v", fs.Name(), err)
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// printFlagsHelp prints the usage of fs's command and its flags on stdout.
func (inv *invocation) printFlagsHelp(fs *flag.FlagSet) {
	if c, ok := lookupCommand(topCommand(fs.Name())); ok {
		printCommandUsage(inv.stdout, c)
	}
	fmt.Fprintln(inv.stdout, "\nFlags:")
	fs.SetOutput(inv.stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// topCommand is the first word of a command path such as "apps apply".
func topCommand(cmd string) string {
	top, _, _ := strings.Cut(cmd, " ")
	return top
}

// wantArgs checks that cmd got exactly the positional arguments named.
func wantArgs(cmd string, args []string, names ...string) error {
	switch {
	case len(args) < len(names):
		return usagef(topCommand(cmd), "%s: missing %s", cmd, strings.Join(names[len(args):], " "))
	case len(args) > len(names):
		return usagef(topCommand(cmd), "%s: unexpected argument %q", cmd, args[len(names)])
	}
	return nil
}

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// splitSubcommand finds the subcommand of a command group such as "apps":
// the first argument that is not a flag. Flags before it (like --json) stay
// in rest, for the subcommand's own flag set.
func splitSubcommand(args []string) (sub string, rest []string) {
	for i, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest = append(append([]string{}, args[:i]...), args[i+1:]...)
			return a, rest
		}
	}
	return "", args
}
