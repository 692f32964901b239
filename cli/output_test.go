package cli

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
)

// A subscriber's error body reached operators' terminals with its escape
// sequences intact: it could clear the screen, retitle the window or hide
// text. cleanCell keeps only printable text.
func TestCleanCellStripsControlCharacters(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text, ünïcode ok", "plain text, ünïcode ok"},
		{"a\tb\nc\r\nd", "a b c  d"},
		{"\x1b[2J\x1b[31mred\x1b[0m", "[2J[31mred[0m"},
		{"title\x1b]0;pwned\x07!", "title]0;pwned!"},
		{"nul\x00 del\x7f c1\u009b1m", "nul del c11m"},
		{"abc\u202edcba\u2066x\u2069", "abcdcbax"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
		{"line\u2028sep", "line sep"},
	}
	for _, tt := range tests {
		got := cleanCell(tt.in)
		if got != tt.want {
			t.Errorf("cleanCell(%q) = %q, want %q", tt.in, got, tt.want)
		}
		for _, r := range got {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
				t.Errorf("cleanCell(%q) kept %U", tt.in, r)
			}
		}
	}
}

func TestTableCellsAreCleaned(t *testing.T) {
	var out bytes.Buffer
	tb := newTable(&out, "KEY", "LAST ERROR")
	tb.row("person-1", "handler_failed: status 500: \x1b]0;owned\x07\x1b[2Jgone")
	if err := tb.flush(); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Errorf("table output kept escape characters: %q", out.String())
	}
	if !strings.Contains(out.String(), "]0;owned[2Jgone") {
		t.Errorf("table output %q lost the printable text", out.String())
	}
}
