package deploy_test

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"herald/manifest"
)

// TestComposeManifests: deploy/manifests holds the example manifests, the
// same in everything but the endpoint, which is the compose subscriber on the
// port it listens on; the subscriber receives for every one of those apps, and
// herald-init applies the directory that is mounted from deploy/manifests.
func TestComposeManifests(t *testing.T) {
	c := loadCompose(t)
	sub, ok := c.Services["herald-subscriber"]
	if !ok {
		t.Fatal("no herald-subscriber service")
	}
	_, subPort, err := net.SplitHostPort(sub.Environment["SUBSCRIBER_ADDR"])
	if err != nil {
		t.Fatalf("herald-subscriber: SUBSCRIBER_ADDR %q: %v", sub.Environment["SUBSCRIBER_ADDR"], err)
	}
	apps := strings.Split(sub.Environment["SUBSCRIBER_APPS"], ",")

	examples := manifestFiles(t, filepath.Join(repoRoot, "examples", "manifests"))
	deployed := manifestFiles(t, "manifests")
	if !slices.Equal(examples, deployed) {
		t.Fatalf("deploy/manifests holds %v, examples/manifests holds %v", deployed, examples)
	}
	for _, name := range deployed {
		t.Run(name, func(t *testing.T) {
			ex, err := manifest.ParseFile(filepath.Join(repoRoot, "examples", "manifests", name))
			if err != nil {
				t.Fatal(err)
			}
			dep, err := manifest.ParseFile(filepath.Join("manifests", name))
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(dep.Endpoint)
			if err != nil {
				t.Fatalf("endpoint %q: %v", dep.Endpoint, err)
			}
			if u.Hostname() != "herald-subscriber" || u.Port() != subPort {
				t.Errorf("endpoint %s: want http://herald-subscriber:%s", dep.Endpoint, subPort)
			}
			if !slices.Contains(apps, dep.App) {
				t.Errorf("herald-subscriber does not receive for %s (SUBSCRIBER_APPS %q)", dep.App, sub.Environment["SUBSCRIBER_APPS"])
			}
			same := *dep
			same.Endpoint = ex.Endpoint
			if same.Hash() != ex.Hash() {
				t.Errorf("differs from examples/manifests/%s in more than the endpoint", name)
			}
		})
	}

	init, ok := c.Services["herald-init"]
	if !ok {
		t.Fatal("no herald-init service")
	}
	cmd := strings.Join(init.Command, " ")
	applied := false
	for _, m := range init.Volumes {
		if filepath.Clean(m.Source) == filepath.Join("deploy", "manifests") && strings.Contains(cmd, "apps apply "+m.Target) {
			applied = true
		}
	}
	if !applied {
		t.Errorf("herald-init does not apply the directory mounted from ./deploy/manifests (command %q)", cmd)
	}
}

// manifestFiles lists the manifest files of a directory, by name.
func manifestFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".json", ".yaml", ".yml":
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		t.Fatalf("no manifests in %s", dir)
	}
	return names
}
