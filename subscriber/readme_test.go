package subscriber_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeReceiverCompiles keeps the README's "Receiving events" example a
// complete program under 30 lines that builds against this package.
func TestReadmeReceiverCompiles(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Receiving events")
	if !ok {
		t.Fatal(`README.md has no "Receiving events" section`)
	}
	_, code, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatal("the Receiving events section has no Go example")
	}
	code, _, _ = strings.Cut(code, "```")
	if n := strings.Count(code, "\n"); n >= 30 {
		t.Fatalf("the README receiver has %d lines, want under 30", n)
	}
	// Build it as a program inside this module, where herald/subscriber
	// resolves, through an overlay: nothing is written into the checkout.
	tmp := t.TempDir()
	mainGo := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(mainGo, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	virtual := filepath.Join(root, "subscriber", "readme-receiver-overlay", "main.go")
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {virtual: mainGo}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", overlayFile, "-o", os.DevNull, "./subscriber/readme-receiver-overlay")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README receiver does not build: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Dir(virtual)); !os.IsNotExist(err) {
		t.Fatalf("the build left %s in the checkout (err %v)", filepath.Dir(virtual), err)
	}
}
