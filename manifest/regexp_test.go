package manifest

import (
	"encoding/json"
	"regexp/syntax"
	"strings"
	"testing"
	"time"
)

func TestRegexpCost(t *testing.T) {
	tests := []struct {
		pattern  string
		min, max int
	}{
		{`^[A-Z]{3}$`, 3, 10},
		{`abc`, 3, 5},
		{`^(a|b)*c$`, 3, 10},
		{`c{1,1000}`, 1000, 1001},
		{`(ab){2,10}`, 20, 40},
		{`c{5,}`, 6, 8},
		{`((c{1,1000}){1,1000}){1,1000}`, maxRegexpCost + 1, maxRegexpCost + 1}, // saturates
	}
	for _, tt := range tests {
		re, err := syntax.Parse(tt.pattern, syntax.Perl)
		if err != nil {
			// Go refuses some nested repetitions outright; that is fine too.
			continue
		}
		if got := regexpCost(re); got < tt.min || got > tt.max {
			t.Errorf("regexpCost(%q) = %d, want %d..%d", tt.pattern, got, tt.min, tt.max)
		}
	}
}

func TestCompileSchemaRegexpBudget(t *testing.T) {
	schema := func(pattern string, n int) json.RawMessage {
		p, _ := json.Marshal(map[string]string{"pattern": pattern})
		return json.RawMessage(`{"anyOf":[` + strings.TrimSuffix(strings.Repeat(string(p)+",", n), ",") + `]}`)
	}
	if _, err := CompileSchema(schema(`^[A-Z]{3}-[0-9]{1,8}$`, 500)); err != nil {
		t.Errorf("500 ordinary patterns refused: %v", err)
	}
	start := time.Now()
	_, err := CompileSchema(schema(`^x{1,1000}$`, 1500))
	if err == nil || !strings.Contains(err.Error(), "regular expressions are too complex") {
		t.Errorf("1,500 large repetitions: %v", err)
	}
	if err != nil && strings.Count(err.Error(), "; ") > maxSchemaMessages {
		t.Errorf("message lists more than %d reasons: %.300s", maxSchemaMessages, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusing took %v", d)
	}
}
