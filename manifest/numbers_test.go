package manifest

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestNumberProblem(t *testing.T) {
	tests := []struct {
		number string
		want   string // substring of the problem, "" for a number within bounds
	}{
		{"0", ""},
		{"-12.5", ""},
		{"1e400", ""},
		{"1E+400", ""},
		{"1e-400", ""},
		{"2.5e0000000000400", ""},
		{"0e0", ""},
		{"1e401", "exponent must be between -400 and 400"},
		{"1e-401", "exponent must be between -400 and 400"},
		{"1e999999", "exponent must be between"},
		{"1e100000000", "exponent must be between"},
		{"-1E+99999999999999999999999", "exponent must be between"},
		{"1" + strings.Repeat("0", MaxNumberDigits-1), ""},
		{"1" + strings.Repeat("0", MaxNumberDigits), "has 401 digits; at most 400"},
		{"0." + strings.Repeat("0", MaxNumberDigits) + "1", "digits; at most 400"},
	}
	for _, tt := range tests {
		got := numberProblem(tt.number)
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("numberProblem(%.30s) = %q, want %q", tt.number, got, tt.want)
		}
		if len(got) > 200 {
			t.Errorf("numberProblem(%.30s) message is %d bytes long", tt.number, len(got))
		}
	}
}

// A number with an exponent of a million or more made the validator panic
// on minimum, maximum, multipleOf and uniqueItems; now it is a DataError at
// the number's pointer.
func TestValidateDataHugeExponent(t *testing.T) {
	schemas := map[string]string{
		"minimum":     `{"properties":{"total":{"minimum":0}}}`,
		"maximum":     `{"properties":{"total":{"maximum":0}}}`,
		"multipleOf":  `{"properties":{"total":{"multipleOf":0.01}}}`,
		"uniqueItems": `{"properties":{"total":{"type":"array","uniqueItems":true}}}`,
	}
	data := map[string]string{
		"minimum":     `{"total":1e100000000}`,
		"maximum":     `{"total":-1e100000000}`,
		"multipleOf":  `{"total":1E+100000000}`,
		"uniqueItems": `{"total":[` + strings.Repeat(`1,`, 25) + `1e100000000]}`,
	}
	for name, schema := range schemas {
		t.Run(name, func(t *testing.T) {
			sch, err := CompileSchema(json.RawMessage(schema))
			if err != nil {
				t.Fatalf("CompileSchema: %v", err)
			}
			errs := ValidateData(sch, json.RawMessage(data[name]))
			if len(errs) != 1 || !strings.HasPrefix(errs[0].Pointer, "/total") ||
				!strings.Contains(errs[0].Message, "exponent must be between -400 and 400") {
				t.Fatalf("errors %+v, want one exponent error at /total", errs)
			}
		})
	}
}

// 1e999999 was accepted, at some 30 ms of CPU per number compared.
func TestValidateDataCostlyExponentRefused(t *testing.T) {
	sch, err := CompileSchema(json.RawMessage(`{"type":"array","items":{"type":"number","minimum":0}}`))
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	data := `[` + strings.TrimSuffix(strings.Repeat(`1e999999,`, 200), ",") + `]`
	start := time.Now()
	errs := ValidateData(sch, json.RawMessage(data))
	if took := time.Since(start); took > time.Second {
		t.Errorf("validation took %v", took)
	}
	if len(errs) != maxNumberErrors || errs[0].Pointer != "/0" || !strings.Contains(errs[0].Message, "exponent") {
		t.Fatalf("errors %+v, want %d exponent errors from /0", errs, maxNumberErrors)
	}
}

func TestValidateSafelyRecoversAPanic(t *testing.T) {
	sch, err := CompileSchema(json.RawMessage(`{"properties":{"total":{"multipleOf":3}}}`))
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	// Bypasses the number bounds, as a future validator bug might.
	err = validateSafely(sch, map[string]any{"total": json.Number("1e100000000")})
	var p validatorPanic
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "could not be validated") {
		t.Fatalf("validateSafely = %v, want a recovered panic", err)
	}
}

func TestCompileSchemaNumberBounds(t *testing.T) {
	for _, schema := range []string{
		`{"minimum":1e999999}`,
		`{"properties":{"a":{"enum":[1,2,1e-100000000]}}}`,
		`{"multipleOf":0.` + strings.Repeat("0", 500) + `1}`,
	} {
		_, err := CompileSchema(json.RawMessage(schema))
		if !errors.Is(err, ErrSchemaLimit) || !strings.Contains(err.Error(), "number out of bounds at") {
			t.Errorf("CompileSchema(%.40s) = %v, want a number-bounds limit error", schema, err)
		}
	}
	if _, err := CompileSchema(json.RawMessage(`{"minimum":-1e400,"maximum":1.5e400}`)); err != nil {
		t.Errorf("numbers within bounds refused: %v", err)
	}
}

// Every number the bounds let through must be one big.Rat can hold, so the
// validator never meets a number it cannot convert.
func FuzzNumberBounds(f *testing.F) {
	for _, s := range []string{"0", "-1.5e10", "1e400", "1e401", "1e100000000", "0.000001", "12345678901234567890e-300"} {
		f.Add(s)
	}
	sch, err := CompileSchema(json.RawMessage(`{"type":"array","uniqueItems":true,"items":{"minimum":-1,"maximum":1e300,"multipleOf":0.5,"not":{"const":7}}}`))
	if err != nil {
		f.Fatalf("CompileSchema: %v", err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := decodeJSON([]byte(s)); err != nil || s != strings.TrimSpace(s) {
			return
		} else if _, ok := v.(json.Number); !ok {
			return
		}
		data := json.RawMessage(`[` + s + `,` + s + `]`)
		if numberProblem(s) == "" {
			if _, ok := new(big.Rat).SetString(s); !ok {
				t.Fatalf("%s is within bounds but big.Rat refuses it", s)
			}
		}
		for _, e := range ValidateData(sch, data) {
			if strings.Contains(e.Message, "could not be validated") {
				t.Fatalf("validator panicked on %s: %s", s, e.Message)
			}
		}
	})
}
