package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd  string // upper case: FROM, RUN, USER, ...
	Args string
	Line int
}

// parseDockerfile splits a Dockerfile into instructions. It skips comments
// and parser directives and joins lines ending in a backslash.
func parseDockerfile(text string) []instruction {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSpace(strings.TrimSuffix(trimmed, `\`)) + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: start})
		cur.Reset()
	}
	return out
}

// stages groups instructions by build stage (each starts with FROM).
func stages(ins []instruction) [][]instruction {
	var out [][]instruction
	for _, in := range ins {
		if in.Cmd == "FROM" {
			out = append(out, nil)
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], in)
		}
	}
	return out
}

// shellCommands splits a RUN instruction's shell form into simple commands
// (at &&, || and ;), after dropping RUN's own --flags such as --mount.
func shellCommands(args string) [][]string {
	fields := strings.Fields(args)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		fields = fields[1:]
	}
	var out [][]string
	var cur []string
	for _, f := range fields {
		switch f {
		case "&&", "||", ";":
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
		default:
			cur = append(cur, f)
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// isGoBuild reports whether a simple command runs `go build`, possibly
// after variable assignments.
func isGoBuild(words []string) bool {
	for i, w := range words {
		if strings.Contains(w, "=") && !strings.HasPrefix(w, "-") {
			continue // NAME=value before the command
		}
		return (w == "go" || w == "$(GO)") && i+1 < len(words) && words[i+1] == "build"
	}
	return false
}

// normalizeGo spells the Makefile's $(GO) as go.
func normalizeGo(words []string) []string {
	out := slices.Clone(words)
	for i, w := range out {
		if w == "$(GO)" || w == "${GO}" {
			out[i] = "go"
		}
	}
	return out
}

// dockerfileGoBuilds returns the `go build` commands of the Dockerfile's RUN
// instructions.
func dockerfileGoBuilds(text string) [][]string {
	var out [][]string
	for _, in := range parseDockerfile(text) {
		if in.Cmd != "RUN" {
			continue
		}
		for _, cmd := range shellCommands(in.Args) {
			if isGoBuild(cmd) {
				out = append(out, cmd)
			}
		}
	}
	return out
}

// makeTargetCommands returns the `go build` commands of one Makefile target's
// recipe.
func makeTargetCommands(text, target string) ([][]string, error) {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		name, _, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "\t") || strings.TrimSpace(name) != target || strings.HasPrefix(line, ".") {
			continue
		}
		var out [][]string
		for _, recipe := range lines[i+1:] {
			if !strings.HasPrefix(recipe, "\t") {
				break
			}
			for _, cmd := range shellCommands(strings.TrimLeft(strings.TrimSpace(recipe), "@-")) {
				if isGoBuild(cmd) {
					out = append(out, normalizeGo(cmd))
				}
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no %s target", target)
}

// checkBuildCommand: the Dockerfile builds with exactly the Makefile's build
// command, so the image and `make build` produce the same binaries.
func checkBuildCommand(dockerfile, makefile string) []string {
	want, err := makeTargetCommands(makefile, "build")
	if err != nil {
		return []string{"Makefile: " + err.Error()}
	}
	if len(want) != 1 {
		return []string{fmt.Sprintf("Makefile build target: want one go build command, found %d", len(want))}
	}
	got := dockerfileGoBuilds(dockerfile)
	if len(got) != 1 {
		return []string{fmt.Sprintf("Dockerfile: want one go build command, found %d", len(got))}
	}
	if !slices.Equal(got[0], want[0]) {
		return []string{fmt.Sprintf("Dockerfile builds with %q but make build runs %q",
			strings.Join(got[0], " "), strings.Join(want[0], " "))}
	}
	return nil
}

// checkDockerfile: a multi-stage build whose build step uses cache mounts for
// modules and the build cache, and whose final stage is not the Go image,
// holds the three binaries and runs as a non-root user.
func checkDockerfile(text string) []string {
	st := stages(parseDockerfile(text))
	if len(st) < 2 {
		return []string{fmt.Sprintf("want a multi-stage build, found %d stage(s)", len(st))}
	}
	var problems []string
	for _, in := range parseDockerfile(text) {
		if in.Cmd == "RUN" && slices.ContainsFunc(shellCommands(in.Args), isGoBuild) {
			for _, target := range []string{"target=/go/pkg/mod", "target=/root/.cache/go-build"} {
				if !strings.Contains(in.Args, "--mount=type=cache,"+target) {
					problems = append(problems, fmt.Sprintf("line %d: go build without a cache mount %s", in.Line, target))
				}
			}
		}
	}
	final := st[len(st)-1]
	if base := strings.Fields(final[0].Args); len(base) == 0 || strings.HasPrefix(base[0], "golang") {
		problems = append(problems, fmt.Sprintf("line %d: the final stage is based on %q; want a small runtime image",
			final[0].Line, final[0].Args))
	}
	var user string
	var copied []string
	for _, in := range final {
		switch in.Cmd {
		case "USER":
			user = in.Args
		case "COPY":
			if strings.Contains(in.Args, "--from=") {
				copied = append(copied, strings.Fields(in.Args)...)
			}
		}
	}
	if name, _, _ := strings.Cut(user, ":"); name == "" || name == "root" || name == "0" {
		problems = append(problems, fmt.Sprintf("the final stage runs as %q; want a non-root USER", user))
	}
	for _, bin := range []string{"workers", "starter", "subscriber"} {
		if !slices.ContainsFunc(copied, func(f string) bool { return filepath.Base(f) == bin }) {
			problems = append(problems, fmt.Sprintf("the final stage does not copy the %s binary", bin))
		}
	}
	return problems
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(data)
}

func TestDockerfile(t *testing.T) {
	dockerfile, makefile := readRepoFile(t, "Dockerfile"), readRepoFile(t, "Makefile")
	for _, p := range checkBuildCommand(dockerfile, makefile) {
		t.Error(p)
	}
	for _, p := range checkDockerfile(dockerfile) {
		t.Error(p)
	}
}

// TestDockerfileChecksCatchBrokenFiles changes the real Dockerfile or
// Makefile in one place at a time and expects a check to report it.
func TestDockerfileChecksCatchBrokenFiles(t *testing.T) {
	dockerfile, makefile := readRepoFile(t, "Dockerfile"), readRepoFile(t, "Makefile")
	const buildFlags = "-trimpath -o bin/"
	if !strings.Contains(dockerfile, buildFlags) || !strings.Contains(makefile, buildFlags) {
		t.Fatalf("both files should contain %q for these cases", buildFlags)
	}
	tests := []struct {
		name                 string
		dockerfile, makefile string
		want                 string
	}{
		{
			name:       "Dockerfile drops -trimpath",
			dockerfile: strings.Replace(dockerfile, buildFlags, "-o bin/", 1),
			makefile:   makefile,
			want:       "make build runs",
		},
		{
			name:       "Makefile builds one more package",
			dockerfile: dockerfile,
			makefile:   strings.Replace(makefile, "./examples/subscriber", "./examples/subscriber ./tools/bench", 1),
			want:       "make build runs",
		},
		{
			name:       "Dockerfile builds with cgo",
			dockerfile: strings.Replace(dockerfile, "CGO_ENABLED=0 go build", "go build", 1),
			makefile:   makefile,
			want:       "make build runs",
		},
		{
			name:       "final stage runs as root",
			dockerfile: replaceLine(t, dockerfile, "USER ", "USER root"),
			makefile:   makefile,
			want:       "non-root USER",
		},
		{
			name:       "final stage without USER",
			dockerfile: replaceLine(t, dockerfile, "USER ", ""),
			makefile:   makefile,
			want:       "non-root USER",
		},
		{
			name:       "single stage on the Go image",
			dockerfile: "FROM golang:1.26\nRUN CGO_ENABLED=0 go build -trimpath -o bin/ ./workers ./starter ./examples/subscriber\nUSER 1000\n",
			makefile:   makefile,
			want:       "multi-stage",
		},
		{
			name:       "no build cache mount",
			dockerfile: strings.Replace(dockerfile, "--mount=type=cache,target=/root/.cache/go-build", "", 1),
			makefile:   makefile,
			want:       "cache mount",
		},
		{
			name:       "subscriber left out of the image",
			dockerfile: strings.Replace(dockerfile, " /src/bin/subscriber", "", 1),
			makefile:   makefile,
			want:       "subscriber binary",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := append(checkBuildCommand(tt.dockerfile, tt.makefile), checkDockerfile(tt.dockerfile)...)
			for _, p := range problems {
				if strings.Contains(p, tt.want) {
					return
				}
			}
			t.Errorf("want a problem mentioning %q, got %q", tt.want, problems)
		})
	}
}

// replaceLine replaces the last line starting with prefix.
func replaceLine(t *testing.T, text, prefix, with string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], prefix) {
			lines[i] = with
			return strings.Join(lines, "\n")
		}
	}
	t.Fatalf("no line starts with %q", prefix)
	return ""
}

func TestParseDockerfile(t *testing.T) {
	text := "# syntax=docker/dockerfile:1\n# comment\nFROM a AS b\nRUN --mount=type=cache,target=/x \\\n" +
		"    # inner comment\n    X=1 go build -o out/ ./a && echo done\n\nFROM c\nUSER 10:10\n"
	ins := parseDockerfile(text)
	want := []instruction{
		{Cmd: "FROM", Args: "a AS b", Line: 3},
		{Cmd: "RUN", Args: "--mount=type=cache,target=/x X=1 go build -o out/ ./a && echo done", Line: 4},
		{Cmd: "FROM", Args: "c", Line: 8},
		{Cmd: "USER", Args: "10:10", Line: 9},
	}
	if !slices.Equal(ins, want) {
		t.Fatalf("parseDockerfile:\n got %+v\nwant %+v", ins, want)
	}
	builds := dockerfileGoBuilds(text)
	if len(builds) != 1 || strings.Join(builds[0], " ") != "X=1 go build -o out/ ./a" {
		t.Errorf("dockerfileGoBuilds = %q", builds)
	}
	if got := len(stages(ins)); got != 2 {
		t.Errorf("stages = %d, want 2", got)
	}
}
