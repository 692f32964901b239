package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func appDoc(t *testing.T, app string) []byte {
	doc := validDoc()
	doc["app"] = app
	return render(t, doc)
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b-billing.json"), appDoc(t, "billing"))
	writeFile(t, filepath.Join(dir, "a-contacts.yml"), []byte("app: contacts\nendpoint: http://127.0.0.1:8089\n"))
	writeFile(t, filepath.Join(dir, "README.md"), []byte("not a manifest"))
	writeFile(t, filepath.Join(dir, "nested", "c.json"), []byte("{broken"))
	if err := os.Mkdir(filepath.Join(dir, "dir.json"), 0o755); err != nil {
		t.Fatal(err)
	}

	ms, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	var apps []string
	for _, m := range ms {
		apps = append(apps, m.App)
	}
	if strings.Join(apps, ",") != "contacts,billing" {
		t.Errorf("apps %v, want contacts,billing (by file name)", apps)
	}
	if want := filepath.Join(dir, "a-contacts.yml"); ms[0].Source != want {
		t.Errorf("source %q, want %q", ms[0].Source, want)
	}
}

func TestLoadFilesAndDirectories(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "apps", "billing.json"), appDoc(t, "billing"))
	writeFile(t, filepath.Join(dir, "apps", "audit.yaml"), []byte("app: audit\nendpoint: http://h\n"))
	file := filepath.Join(dir, "contacts.manifest")
	writeFile(t, file, appDoc(t, "contacts"))

	ms, err := Load(file, filepath.Join(dir, "apps"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(ms) != 3 || ms[0].App != "contacts" || ms[1].App != "audit" || ms[2].App != "billing" {
		t.Errorf("loaded %d manifests: %+v", len(ms), ms)
	}
}

func TestLoadExamples(t *testing.T) {
	ms, err := Load(filepath.Join("..", "examples", "manifests"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(ms) != 3 {
		t.Errorf("%d example manifests, want 3", len(ms))
	}
}

func TestLoadReportsAllProblems(t *testing.T) {
	dir := t.TempDir()
	bad1 := validDoc()
	bad1["app"] = "billing"
	event(bad1, 0)["version"] = 0
	writeFile(t, filepath.Join(dir, "billing.json"), render(t, bad1))
	writeFile(t, filepath.Join(dir, "contacts.json"), appDoc(t, "contacts"))
	writeFile(t, filepath.Join(dir, "crm.yaml"), []byte("app: crm\nendpoint: ftp://crm\n"))
	writeFile(t, filepath.Join(dir, "people.json"), appDoc(t, "contacts")) // contacts again

	ms, err := Load(dir, filepath.Join(dir, "missing.json"))
	if err == nil {
		t.Fatalf("Load accepted the directory: %+v", ms)
	}
	if ms != nil {
		t.Errorf("Load returned manifests with an error")
	}
	msg := err.Error()
	for _, want := range []string{
		filepath.Join(dir, "billing.json") + ` (app "billing"): events[0].version: must be an integer`,
		filepath.Join(dir, "crm.yaml") + ` (app "crm"): endpoint: "ftp://crm" must be an http or https URL`,
		filepath.Join(dir, "people.json") + ` (app "contacts"): app: app "contacts" is already declared by ` + filepath.Join(dir, "contacts.json"),
		"missing.json: no such file",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not contain %q:\n%s", want, msg)
		}
	}
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Errorf("no *ValidationError in %T", err)
	}
}

func TestLoadEmpty(t *testing.T) {
	if _, err := Load(); err == nil {
		t.Error("Load() without paths succeeded")
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "notes.txt"), []byte("x"))
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "no manifest files") {
		t.Errorf("Load of a directory without manifests: %v", err)
	}
}

func TestParseFileTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.json")
	writeFile(t, path, append([]byte(`{"app":"a","endpoint":"http://h","deliveryPath":"/`), make([]byte, MaxManifestBytes)...))
	_, err := ParseFile(path)
	wantProblem(t, problemsOf(t, err), "", "larger than 1 MiB")

	if _, err := ParseFile(filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "read manifest") {
		t.Errorf("ParseFile of a missing file: %v", err)
	}
}
