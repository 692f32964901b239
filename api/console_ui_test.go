package api_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.temporal.io/sdk/client"

	"herald/api"
	"herald/internal/testenv"
	"herald/workflows"
)

// TestConsoleLinksOpenInTheTemporalUI: the console's links to a key's
// workflow (with and without a run id) open that workflow in a real Temporal
// UI, the one the Temporal CLI's dev server serves, in headless Chromium;
// also for a subject key with characters a URL path must escape. The
// workflows are started on a task queue no worker polls, so they stay
// running.
func TestConsoleLinksOpenInTheTemporalUI(t *testing.T) {
	exe := chromium(t)
	dir := t.TempDir()
	script := filepath.Join(testenv.RepoRoot(), "scripts", "temporal.sh")
	out, err := exec.Command(script, "start", dir).Output() // with its UI
	t.Cleanup(func() { _ = exec.Command(script, "stop", dir).Run() })
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		t.Fatalf("start a Temporal dev server with its UI: %v\n%s", err, log)
	}
	port, err := os.ReadFile(filepath.Join(dir, "ui-port"))
	if err != nil {
		t.Fatal(err)
	}
	ui := "http://127.0.0.1:" + strings.TrimSpace(string(port))
	c, err := client.Dial(client.Options{HostPort: strings.TrimSpace(string(out))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	b := newBrowser(t, exe)
	for _, subject := range []string{"person-1", "a/b c'd%e?#f"} {
		id := workflows.DeliveryID("billing:contacts.person.updated@1", subject)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "no-worker-polls-this"}, workflows.DeliveryWorkflowType)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range []string{api.ConsoleWorkflowURL(ui, "default", id, ""), api.ConsoleWorkflowURL(ui, "default", id, run.GetRunID())} {
			b.do("open "+link, chromedp.Navigate(link))
			var text string
			deadline := time.Now().Add(45 * time.Second)
			for time.Now().Before(deadline) {
				text = eval[string](b, `document.body ? document.body.innerText : ""`)
				if strings.Contains(text, id) && strings.Contains(text, run.GetRunID()) && strings.Contains(text, "Running") {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			if !strings.Contains(text, id) || !strings.Contains(text, run.GetRunID()) || !strings.Contains(text, "Running") {
				t.Errorf("%s: the Temporal UI does not show the running workflow %q (run %s); the page says:\n%.1500s", link, id, run.GetRunID(), text)
			}
		}
	}
}
