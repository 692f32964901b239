package manifest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

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
