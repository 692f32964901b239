package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A 1.3 KB schema whose $refs fan out took 55 s to check and stalled
// `apps apply` for every app. It is refused at once now, naming the event,
// and nothing of the manifest is applied.
func TestApplyRefusesFanOutSchemaQuickly(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t)
	var defs []string
	for i := range 24 {
		defs = append(defs, fmt.Sprintf(`"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1))
	}
	defs = append(defs, `"d24":{"type":"string"}`)
	schema := `{"$defs":{` + strings.Join(defs, ",") + `},"$ref":"#/$defs/d0"}`
	path := writeFile(t, t.TempDir(), "bomb.json", `{"app":"bomb","endpoint":"https://bomb.example",`+
		`"events":[{"name":"thing.happened","version":1,"subject":"thing","dataSchema":`+schema+`}]}`)

	start := time.Now()
	r := run(t, e, "apps", "apply", path)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("apps apply took %v", took)
	}
	if r.code != ExitInvalid {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, `event "thing.happened" v1: dataSchema is refused`, "references are expanded")
	if r := mustRun(t, e, "apps", "list"); strings.Contains(r.stdout, "bomb") {
		t.Errorf("apps list shows the refused app:\n%s", r.stdout)
	}
}

// An 820-byte schema within the expansion budget applies 2^12 paths of oneOf
// to each item of an array: 2,000 items took 35 s to validate. apps apply
// refuses it, saying where in the data the work multiplies.
func TestApplyRefusesSchemaThatMultipliesValidation(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t)
	var defs []string
	for i := range 12 {
		defs = append(defs, fmt.Sprintf(`"d%d":{"oneOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1))
	}
	defs = append(defs, `"d12":{"type":"string"}`)
	schema := `{"$defs":{` + strings.Join(defs, ",") + `},"type":"array","items":{"$ref":"#/$defs/d0"}}`
	path := writeFile(t, t.TempDir(), "slow.json", `{"app":"slow","endpoint":"https://slow.example",`+
		`"events":[{"name":"thing.happened","version":1,"subject":"thing","dataSchema":`+schema+`}]}`)

	r := run(t, e, "apps", "apply", path)
	if r.code != ExitInvalid {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, `event "thing.happened" v1: dataSchema is refused`,
		"more than 256 subschemas to one value of the data (at /(any later item))")
	if r := mustRun(t, e, "apps", "list"); strings.Contains(r.stdout, "slow") {
		t.Errorf("apps list shows the refused app:\n%s", r.stdout)
	}
}
