package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// repoRoot is the repository root as seen from this package's directory,
// where `go test` runs.
const repoRoot = ".."

// composePath is the compose file the checks read.
var composePath = filepath.Join(repoRoot, "docker-compose.yml")

// heraldImage is the image docker-compose.yml builds from the Dockerfile; a
// service running it is a Herald service.
const heraldImage = "herald:dev"

// composeFile is the part of a Compose file the checks look at.
type composeFile struct {
	Services map[string]service `json:"services"`
	Networks map[string]network `json:"networks"`
	Volumes  map[string]any     `json:"volumes"`
}

// service is one Compose service.
type service struct {
	Image         string          `json:"image"`
	Build         json.RawMessage `json:"build"`
	ContainerName string          `json:"container_name"`
	Entrypoint    stringList      `json:"entrypoint"`
	Command       stringList      `json:"command"`
	Environment   envMap          `json:"environment"`
	DependsOn     dependsOn       `json:"depends_on"`
	Ports         []port          `json:"ports"`
	Expose        []any           `json:"expose"`
	Profiles      []string        `json:"profiles"`
	Networks      serviceNets     `json:"networks"`
	Volumes       []mount         `json:"volumes"`
	Healthcheck   *healthcheck    `json:"healthcheck"`
	Restart       string          `json:"restart"`
	// StopGracePeriod is a Compose duration ("60s", "1m30s").
	StopGracePeriod string `json:"stop_grace_period"`
}

// network is a top-level network definition.
type network struct {
	External bool `json:"external"`
	IPAM     struct {
		Config []struct {
			Subnet string `json:"subnet"`
		} `json:"config"`
	} `json:"ipam"`
}

// healthcheck is a service's healthcheck.
type healthcheck struct {
	Test    stringList `json:"test"`
	Disable bool       `json:"disable"`
}

// stringList is a Compose field that is either a string or a list of strings
// (entrypoint, command, healthcheck test).
type stringList []string

func (l *stringList) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*l = stringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return fmt.Errorf("want a string or a list of strings: %w", err)
	}
	*l = many
	return nil
}

// envMap is a service's environment, written as a mapping or as a list of
// NAME=VALUE strings. A variable listed without a value maps to "".
type envMap map[string]string

func (e *envMap) UnmarshalJSON(data []byte) error {
	out := envMap{}
	var list []string
	if err := json.Unmarshal(data, &list); err == nil {
		for _, item := range list {
			name, value, _ := strings.Cut(item, "=")
			out[name] = value
		}
		*e = out
		return nil
	}
	var mapping map[string]any
	if err := json.Unmarshal(data, &mapping); err != nil {
		return fmt.Errorf("environment: want a mapping or a list: %w", err)
	}
	for name, value := range mapping {
		switch v := value.(type) {
		case nil:
			out[name] = ""
		case string:
			out[name] = v
		default: // numbers and booleans, as YAML lets one write them
			out[name] = fmt.Sprint(v)
		}
	}
	*e = out
	return nil
}

// dependsOn maps each dependency to its condition; the short list form
// means service_started.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalJSON(data []byte) error {
	out := dependsOn{}
	var list []string
	if err := json.Unmarshal(data, &list); err == nil {
		for _, name := range list {
			out[name] = "service_started"
		}
		*d = out
		return nil
	}
	var mapping map[string]struct {
		Condition string `json:"condition"`
	}
	if err := json.Unmarshal(data, &mapping); err != nil {
		return fmt.Errorf("depends_on: want a mapping or a list: %w", err)
	}
	for name, dep := range mapping {
		cond := dep.Condition
		if cond == "" {
			cond = "service_started"
		}
		out[name] = cond
	}
	*d = out
	return nil
}

// port is one published port: the host address it binds (empty for all
// interfaces) and the rest of its definition, for messages.
type port struct {
	HostIP string
	Spec   string
}

func (p *port) UnmarshalJSON(data []byte) error {
	var short string
	if err := json.Unmarshal(data, &short); err == nil {
		p.Spec = short
		p.HostIP = shortPortHostIP(short)
		return nil
	}
	var long struct {
		HostIP    string `json:"host_ip"`
		Target    any    `json:"target"`
		Published any    `json:"published"`
	}
	if err := json.Unmarshal(data, &long); err != nil {
		return fmt.Errorf("ports: want the short or the long syntax: %w", err)
	}
	p.HostIP = long.HostIP
	p.Spec = fmt.Sprintf("host_ip=%q published=%v target=%v", long.HostIP, long.Published, long.Target)
	return nil
}

// shortPortHostIP returns the address of "[IP:]HOST:CONTAINER[/proto]", or
// "" when the port is published on every interface. An IPv6 address is
// written in brackets.
func shortPortHostIP(spec string) string {
	spec, _, _ = strings.Cut(spec, "/")
	if strings.HasPrefix(spec, "[") {
		if end := strings.Index(spec, "]"); end > 0 {
			return spec[1:end]
		}
		return ""
	}
	parts := strings.Split(spec, ":")
	if len(parts) == 3 {
		return parts[0]
	}
	return ""
}

// serviceNets is the list of networks a service joins (list or mapping form).
type serviceNets []string

func (n *serviceNets) UnmarshalJSON(data []byte) error {
	var list []string
	if err := json.Unmarshal(data, &list); err == nil {
		*n = list
		return nil
	}
	var mapping map[string]any
	if err := json.Unmarshal(data, &mapping); err != nil {
		return fmt.Errorf("networks: want a list or a mapping: %w", err)
	}
	names := make([]string, 0, len(mapping))
	for name := range mapping {
		names = append(names, name)
	}
	slices.Sort(names)
	*n = names
	return nil
}

// mount is one entry of a service's volumes.
type mount struct {
	Source   string
	Target   string
	ReadOnly bool
}

func (m *mount) UnmarshalJSON(data []byte) error {
	var short string
	if err := json.Unmarshal(data, &short); err == nil {
		parts := strings.Split(short, ":")
		switch len(parts) {
		case 1:
			m.Target = parts[0]
		case 2:
			m.Source, m.Target = parts[0], parts[1]
		default:
			m.Source, m.Target = parts[0], parts[1]
			m.ReadOnly = slices.Contains(strings.Split(parts[2], ","), "ro")
		}
		return nil
	}
	var long struct {
		Source   string `json:"source"`
		Target   string `json:"target"`
		ReadOnly bool   `json:"read_only"`
	}
	if err := json.Unmarshal(data, &long); err != nil {
		return fmt.Errorf("volumes: want the short or the long syntax: %w", err)
	}
	m.Source, m.Target, m.ReadOnly = long.Source, long.Target, long.ReadOnly
	return nil
}

// isNamedVolume reports whether the mount's source is a named volume rather
// than a host path.
func (m mount) isNamedVolume() bool {
	return m.Source != "" && !strings.HasPrefix(m.Source, ".") && !strings.HasPrefix(m.Source, "/") &&
		!strings.HasPrefix(m.Source, "~")
}

// isHerald reports whether the service runs Herald's image.
func (s service) isHerald() bool { return s.Image == heraldImage }

// programs lists which of Herald's binaries the service runs, from its
// entrypoint and command.
func (s service) programs() []string {
	var words []string
	for _, part := range append(slices.Clone(s.Entrypoint), s.Command...) {
		words = append(words, strings.FieldsFunc(part, func(r rune) bool {
			return strings.ContainsRune(" \t\n;&|()'\"/", r)
		})...)
	}
	var out []string
	for _, prog := range []string{"workers", "starter", "subscriber"} {
		if slices.Contains(words, prog) {
			out = append(out, prog)
		}
	}
	return out
}

// exposes reports whether expose lists port (a number or a "port/proto"
// string, as Compose accepts both).
func (s service) exposes(port string) bool {
	for _, e := range s.Expose {
		if p, _, _ := strings.Cut(fmt.Sprint(e), "/"); p == port {
			return true
		}
	}
	return false
}

// networks returns the networks the service joins: "default" when it names none.
func (s service) networks() []string {
	if len(s.Networks) == 0 {
		return []string{"default"}
	}
	return s.Networks
}

// composeJSON reads the compose file and converts it to JSON, resolving YAML
// anchors and merge keys the way Compose does.
func composeJSON(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatalf("read compose file: %v", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s is not valid YAML: %v", composePath, err)
	}
	return js
}

// decodeCompose decodes the JSON form of a compose file, refusing unknown
// top-level keys so that a typo (servics:) cannot hide every service.
func decodeCompose(js []byte) (*composeFile, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, fmt.Errorf("compose file is not a mapping: %w", err)
	}
	for key := range top {
		if !slices.Contains([]string{"name", "services", "networks", "volumes", "configs", "secrets"}, key) &&
			!strings.HasPrefix(key, "x-") {
			return nil, fmt.Errorf("unknown top-level key %q", key)
		}
	}
	var c composeFile
	dec := json.NewDecoder(bytes.NewReader(js))
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decode compose file: %w", err)
	}
	if len(c.Services) == 0 {
		return nil, fmt.Errorf("compose file defines no services")
	}
	return &c, nil
}

// loadCompose parses docker-compose.yml.
func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	c, err := decodeCompose(composeJSON(t))
	if err != nil {
		t.Fatalf("%s: %v", composePath, err)
	}
	return c
}

// mutatedCompose returns the compose file after mutate changed its generic
// JSON form, for the tests that show each check catching a broken file.
func mutatedCompose(t *testing.T, mutate func(doc map[string]any)) *composeFile {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(composeJSON(t), &doc); err != nil {
		t.Fatalf("compose JSON: %v", err)
	}
	mutate(doc)
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("marshal mutated compose: %v", err)
	}
	c, err := decodeCompose(js)
	if err != nil {
		t.Fatalf("mutated compose: %v", err)
	}
	return c
}

// serviceDoc returns the generic form of one service in a compose document.
func serviceDoc(t *testing.T, doc map[string]any, name string) map[string]any {
	t.Helper()
	services, _ := doc["services"].(map[string]any)
	svc, ok := services[name].(map[string]any)
	if !ok {
		t.Fatalf("compose file has no service %q", name)
	}
	return svc
}

// mapAt follows keys through nested mappings of a compose document.
func mapAt(t *testing.T, m map[string]any, keys ...string) map[string]any {
	t.Helper()
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			t.Fatalf("compose document: %q is not a mapping (path %q)", k, keys)
		}
		m = next
	}
	return m
}

// envDoc returns the environment mapping of one service in a compose document.
func envDoc(t *testing.T, doc map[string]any, name string) map[string]any {
	t.Helper()
	svc := serviceDoc(t, doc, name)
	env, ok := svc["environment"].(map[string]any)
	if !ok {
		t.Fatalf("service %q has no environment mapping", name)
	}
	return env
}
