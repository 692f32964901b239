package config

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"herald/signing"
)

// docsPage is the one table of settings.
const docsPage = "../docs/configuration.md"

// envRow is one row of the table: the variable and its documented default.
type envRow struct{ name, def string }

func readEnvTable(t *testing.T) []envRow {
	t.Helper()
	f, err := os.Open(docsPage)
	if err != nil {
		t.Fatalf("open %s: %v", docsPage, err)
	}
	defer f.Close()
	var rows []envRow
	cell := regexp.MustCompile("^`([A-Z][A-Z0-9_]*)`$")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cols := strings.Split(strings.Trim(line, "|"), "|")
		if len(cols) < 5 {
			t.Fatalf("%s: a row with %d columns, want 5: %s", docsPage, len(cols), line)
		}
		m := cell.FindStringSubmatch(strings.TrimSpace(cols[0]))
		if m == nil {
			t.Fatalf("%s: one variable per row, in backticks: %s", docsPage, line)
		}
		rows = append(rows, envRow{name: m[1], def: strings.Trim(strings.TrimSpace(cols[1]), "`")})
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no table of variables", docsPage)
	}
	return rows
}

// variablesInCode lists the HERALD_ and TEMPORAL_ variables named by string
// literals in the programs' packages (tests, the benchmark, the chaos suite
// and the end-to-end tests have variables of their own, listed in
// docs/development.md).
func variablesInCode(t *testing.T) []string {
	t.Helper()
	lit := regexp.MustCompile(`"((?:HERALD|TEMPORAL)_[A-Z0-9_]+)"`)
	skip := map[string]bool{"bench": true, "chaos": true, "e2e": true, "examples": true, ".tools": true, ".dev": true, "internal": true}
	seen := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != ".." && (skip[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllStringSubmatch(string(src), -1) {
			seen[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range EnvNames(Worker{}) {
		seen[n] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestConfigurationPageListsEveryVariable keeps docs/configuration.md and the
// code in step both ways.
func TestConfigurationPageListsEveryVariable(t *testing.T) {
	rows := readEnvTable(t)
	documented := map[string]bool{}
	for _, r := range rows {
		if documented[r.name] {
			t.Errorf("%s is documented twice", r.name)
		}
		documented[r.name] = true
	}
	inCode := variablesInCode(t)
	for _, n := range inCode {
		if !documented[n] {
			t.Errorf("the code reads %s but %s does not document it", n, docsPage)
		}
	}
	for _, r := range rows {
		if !slices.Contains(inCode, r.name) {
			t.Errorf("%s documents %s, which no program reads", docsPage, r.name)
		}
	}
}

// TestConfigurationPageDefaultsAreTheCodes compares each documented default
// with what the code does when the variable is unset.
func TestConfigurationPageDefaultsAreTheCodes(t *testing.T) {
	rows := readEnvTable(t)
	required := map[string]string{"HERALD_DATABASE_URL": "postgres://db", "HERALD_SIGNING_KEY": "/keys", "HERALD_SECRET_KEY": "@/keys/secret.key"}
	w, err := LoadWorker(func(k string) string { return required[k] })
	if err != nil {
		t.Fatal(err)
	}
	p := w.DeliveryParams()
	issuer := w.Issuer
	if issuer == "" {
		issuer = signing.DefaultIssuer
	}
	durations := func(ds []time.Duration) string {
		var parts []string
		for _, d := range ds {
			parts = append(parts, short(d))
		}
		return strings.Join(parts, ",")
	}
	topts, err := w.TemporalClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	compression := "gzip" // the SDK's when the options name none
	if _, ok := topts.ConnectionOptions.GrpcCompression.(*client.GrpcCompressionNone); ok {
		compression = "none"
	}
	want := map[string]string{
		"HERALD_TEMPORAL_COMPRESSION":  compression,
		"TEMPORAL_ADDRESS":             w.TemporalAddress,
		"TEMPORAL_NAMESPACE":           w.TemporalNamespace,
		"HERALD_JWT_ISSUER":            issuer,
		"HERALD_RETRY_SCHEDULE":        durations(p.RetrySchedule),
		"HERALD_DELIVERY_TIMEOUT":      short(p.DeliveryTimeout),
		"HERALD_REARM_COOLDOWN":        short(p.RearmCooldown),
		"HERALD_MAX_REARMS":            strconv.Itoa(p.MaxRearms),
		"HERALD_IDLE_TIMEOUT":          short(p.IdleTimeout),
		"HERALD_END_QUIET_KEYS":        strconv.FormatBool(p.EndQuietKeys),
		"HERALD_HOLD_EXPIRY":           short(p.HoldExpiry),
		"HERALD_RETENTION":             short(w.Retention),
		"HERALD_RETENTION_EVERY":       short(w.RetentionEvery),
		"HERALD_DB_MAX_CONNS":          strconv.Itoa(w.DBMaxConns),
		"HERALD_DB_MIN_CONNS":          map[bool]string{true: "HERALD_DB_MAX_CONNS"}[w.DBMinConns == w.DBMaxConns],
		"HERALD_API_DB_CONNS":          strconv.Itoa(w.APIDBConns),
		"HERALD_API_TOKEN_CONCURRENCY": strconv.Itoa(w.APITokenConcurrency),
		"HERALD_API_APP_CONCURRENCY":   strconv.Itoa(w.APIAppConcurrency),
		"HERALD_WORKFLOW_CACHE_SIZE":   strconv.Itoa(w.WorkflowCacheSize),
		"HERALD_RELAY_MAX_ATTEMPTS":    strconv.Itoa(w.RelayMaxAttempts),
		"HERALD_RELAY_POLL_INTERVAL":   short(w.RelayPollInterval),
		"HERALD_RELAY_SIGNAL_ONLY":     strconv.FormatBool(w.RelaySignalOnly),
		"HERALD_TRUST_INCOMING_TRACE":  strconv.FormatBool(w.TrustIncomingTrace),
		"HERALD_HTTP_ADDR":             w.HTTPAddr,
		"HERALD_LOG_LEVEL":             w.LogLevel,
		"HERALD_WORKER_URL":            "http://" + DefaultHTTPAddr,
		"HERALD_OWNER_DATABASE_URL":    "HERALD_DATABASE_URL",
		"HERALD_SIGN_V1A":              map[bool]string{false: "on", true: "off"}[w.NoV1A],
	}
	for _, r := range rows {
		switch r.def {
		case "required":
			env := map[string]string{}
			for k, v := range required {
				if k != r.name {
					env[k] = v
				}
			}
			if _, err := LoadWorker(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), r.name) {
				t.Errorf("%s is documented as required, but the worker starts without it (err %v)", r.name, err)
			}
			continue
		case "empty", "off":
			if w, ok := want[r.name]; ok {
				t.Errorf("%s: documented %q, the code's default is %q", r.name, r.def, w)
			}
			continue
		}
		w, ok := want[r.name]
		if !ok {
			t.Errorf("%s: documented default %q, but this test does not know the code's (add it here)", r.name, r.def)
			continue
		}
		if w != r.def {
			t.Errorf("%s: documented default %q, the code's is %q", r.name, r.def, w)
		}
	}
}

// short writes a duration the way the docs do: 2m rather than 2m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
