package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"herald/manifest"
	"herald/publish"
	"herald/store"
)

func TestUsageAndUnknownCommands(t *testing.T) {
	t.Parallel()
	noDB := env{}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout []string
		wantStderr []string
	}{
		{"help lists every command, later ones too", []string{"help"}, ExitOK,
			[]string{"starter migrate", "starter apps apply PATH...", "starter catalog", "starter publish --file",
				"starter status", "starter audit", "starter keys generate --out DIR",
				"starter deliveries", "starter inspect", "starter redeliver", "starter cancel",
				"starter pause --subscription", "starter resume --subscription"}, nil},
		{"-h", []string{"-h"}, ExitOK, []string{"starter subscriptions pause|resume ID"}, nil},
		{"--help", []string{"--help"}, ExitOK, []string{"Usage:"}, nil},
		{"help of one command", []string{"help", "apps"}, ExitOK, []string{"starter apps remove APP"}, nil},
		{"help ignores flags", []string{"help", "--json", "publish"}, ExitOK, []string{"starter publish --file"}, nil},
		{"help of a subcommand's flags", []string{"apps", "apply", "-h"}, ExitOK, []string{"-actor", "-json"}, nil},
		{"group help", []string{"apps", "--help"}, ExitOK, []string{"starter apps show APP"}, nil},
		{"no command", nil, ExitInvalid, nil, []string{"Usage:"}},
		{"unknown command", []string{"frobnicate"}, ExitInvalid, nil, []string{`unknown command "frobnicate"`}},
		{"help of unknown command", []string{"help", "frobnicate"}, ExitInvalid, nil, []string{`unknown command "frobnicate"`}},
		{"unknown global flag", []string{"--verbose", "status"}, ExitInvalid, nil, []string{"unknown flag --verbose"}},
		{"unknown flag", []string{"status", "--verbose"}, ExitInvalid, nil,
			[]string{"status: flag provided but not defined: -verbose", "usage: starter status"}},
		{"bad flag value", []string{"audit", "--limit", "many"}, ExitInvalid, nil, []string{`invalid value "many"`}},
		{"surplus argument", []string{"catalog", "extra"}, ExitInvalid, nil, []string{`catalog: unexpected argument "extra"`}},
		{"missing argument", []string{"apps", "show"}, ExitInvalid, nil, []string{"apps show: missing APP"}},
		{"unknown apps subcommand", []string{"apps", "delete", "x"}, ExitInvalid, nil, []string{`unknown subcommand "delete"`}},
		{"missing apps subcommand", []string{"apps"}, ExitInvalid, nil, []string{"apps: missing subcommand"}},
		{"apply without paths", []string{"apps", "apply"}, ExitInvalid, nil, []string{"apps apply: missing PATH"}},
		{"unknown subscriptions subcommand", []string{"subscriptions", "stop", "x"}, ExitInvalid, nil, []string{`unknown subcommand "stop"`}},
		{"reason without pause", []string{"subscriptions", "--reason", "x"}, ExitInvalid, nil, []string{"--reason and --actor go with pause or resume"}},
		{"app filter with pause", []string{"subscriptions", "pause", "a:b.c@1", "--app", "a"}, ExitInvalid, nil, []string{"--app only filters the list"}},
		{"pause without id", []string{"subscriptions", "pause"}, ExitInvalid, nil, []string{"subscriptions pause: missing ID"}},
		{"publish without anything", []string{"publish"}, ExitInvalid, nil, []string{"publish: give the event"}},
		{"publish file with event flags", []string{"publish", "--file", "x.ndjson", "--app", "a"}, ExitInvalid, nil,
			[]string{"--file cannot be combined with --app"}},
		{"publish bad version", []string{"publish", "--version", "one"}, ExitInvalid, nil, []string{`invalid value "one" for flag -version`}},
		{"audit limit out of range", []string{"audit", "--limit", "0"}, ExitInvalid, nil, []string{"--limit must be from 1 to 1000"}},
		{"keys without out", []string{"keys", "generate"}, ExitInvalid, nil, []string{"--out DIR is required"}},
		{"unknown keys subcommand", []string{"keys", "rotate"}, ExitInvalid, nil, []string{`unknown subcommand "rotate"`}},
		{"deliveries unknown status", []string{"deliveries", "--status", "stuck"}, ExitInvalid, nil,
			[]string{`deliveries: unknown --status "stuck"`, "usage: starter deliveries"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, noDB, tt.args...)
			if r.code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tt.wantCode, r.stdout, r.stderr)
			}
			wantContains(t, "stdout", r.stdout, tt.wantStdout...)
			wantContains(t, "stderr", r.stderr, tt.wantStderr...)
		})
	}
}

func TestDatabaseCommandsNeedDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate"}, {"apps", "list"}, {"apps", "show", "contacts"}, {"apps", "remove", "contacts"},
		{"catalog"}, {"subscriptions"}, {"subscriptions", "pause", "a:b.c@1"}, {"audit"}, {"status"},
		{"publish", "--app", "a", "--type", "a.b", "--version", "1", "--subject", "k", "--data", "{}"},
		{"apps", "apply", examplesDir()},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := run(t, env{}, args...)
			if r.code != ExitError {
				t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, ExitError, r.stderr)
			}
			wantContains(t, "stderr", r.stderr, "HERALD_DATABASE_URL is not set")
		})
	}
}

func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	e := env{"HERALD_DATABASE_URL": "postgres://herald@127.0.0.1:1/herald?sslmode=disable&connect_timeout=5"}
	r := run(t, e, "status")
	if r.code != ExitError {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, ExitError, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "connect to database")
}

func TestParseFlagsInterleaved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		wantPos   []string
		wantActor string
		wantJSON  bool
	}{
		{"flags first", []string{"--json", "--actor", "al", "a", "b"}, []string{"a", "b"}, "al", true},
		{"flags last", []string{"a", "b", "--actor=al", "--json"}, []string{"a", "b"}, "al", true},
		{"flags between", []string{"a", "-actor", "al", "b"}, []string{"a", "b"}, "al", false},
		{"double dash ends flags", []string{"a", "--", "--json", "-x"}, []string{"a", "--json", "-x"}, "", false},
		{"lone dash is an argument", []string{"-", "--json"}, []string{"-"}, "", true},
		{"no arguments", nil, []string{}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := &invocation{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard}
			fs := inv.newFlags("apps apply")
			actor := fs.String("actor", "", "")
			pos, err := inv.parseFlags(fs, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pos, tt.wantPos) {
				t.Errorf("positional %q, want %q", pos, tt.wantPos)
			}
			if *actor != tt.wantActor || inv.json != tt.wantJSON {
				t.Errorf("actor %q json %v, want %q %v", *actor, inv.json, tt.wantActor, tt.wantJSON)
			}
		})
	}
}

func TestSplitSubcommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args     []string
		wantSub  string
		wantRest []string
	}{
		{[]string{"list"}, "list", []string{}},
		{[]string{"--json", "show", "x"}, "show", []string{"--json", "x"}},
		{[]string{"show", "--json", "x"}, "show", []string{"--json", "x"}},
		{[]string{"--json"}, "", []string{"--json"}},
		{[]string{"--", "list"}, "", []string{"--", "list"}},
	}
	for _, tt := range tests {
		sub, rest := splitSubcommand(tt.args)
		if sub != tt.wantSub || !reflect.DeepEqual(rest, tt.wantRest) {
			t.Errorf("splitSubcommand(%q) = %q, %q; want %q, %q", tt.args, sub, rest, tt.wantSub, tt.wantRest)
		}
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"reported", &reportedError{code: ExitInvalid}, ExitInvalid},
		{"reported help", &reportedError{code: ExitOK}, ExitOK},
		{"usage", usagef("x", "bad"), ExitInvalid},
		{"not found", fmt.Errorf("get app x: %w", store.ErrNotFound), ExitInvalid},
		{"state", fmt.Errorf("resume: %w", &store.StateError{SubscriptionID: "a", Op: "resume", State: "active"}), ExitInvalid},
		{"manifest", errors.Join(&manifest.ValidationError{Problems: []manifest.Problem{{Message: "bad"}}}), ExitInvalid},
		{"rejection", &publish.Rejection{Code: publish.CodeDataInvalid}, ExitInvalid},
		{"other", errors.New("connection refused"), ExitError},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("%s: exitCode = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestMissingSchemaSaysMigrate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, args := range [][]string{{"apps", "list"}, {"catalog"}, {"status"}} {
		r := run(t, e, args...)
		if r.code != ExitError {
			t.Fatalf("%v: exit %d, want %d\nstderr:\n%s", args, r.code, ExitError, r.stderr)
		}
		wantContains(t, "stderr", r.stderr, "run starter migrate (or start the worker) first")
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := mustRun(t, e, "migrate")
	wantContains(t, "stdout", r.stdout, "applied 2 migrations: 1, 2")
	r = mustRun(t, e, "migrate")
	wantContains(t, "stdout", r.stdout, "up to date")
	got := decode[struct{ Applied []int }](t, mustRun(t, e, "migrate", "--json").stdout)
	if got.Applied == nil || len(got.Applied) != 0 {
		t.Errorf("applied = %v, want an empty list", got.Applied)
	}
	// --json before the command name works too.
	decode[map[string]any](t, mustRun(t, e, "--json", "migrate").stdout)
}

func TestPlannedCommandsHaveSynopsis(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range commands {
		if seen[c.name] {
			t.Errorf("command %s listed twice", c.name)
		}
		seen[c.name] = true
		if len(c.synopsis) == 0 || c.summary == "" {
			t.Errorf("command %s has no synopsis or summary", c.name)
		}
		if !strings.Contains(strings.Join(helpGroups, "|"), c.group) {
			t.Errorf("command %s is in unknown group %q", c.name, c.group)
		}
	}
}
