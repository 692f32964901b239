package deploy_test

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"herald/config"
	"herald/netguard"
)

// Service names the checks rely on.
const (
	workerService = "herald-worker"
	setupService  = "temporal-setup"
)

// check is one rule about the compose file; it returns the problems found.
type check func(t *testing.T, c *composeFile) []string

// composeChecks are the rules docker-compose.yml must satisfy.
var composeChecks = []struct {
	name  string
	check check
}{
	{"environment names are read and valid", checkHeraldEnvironment},
	{"worker settings", checkWorker},
	{"published ports on loopback", checkPorts},
	{"allow-list is the compose subnet", checkAllowList},
	{"depends_on", checkDependsOn},
	{"search attributes", checkSearchAttributes},
	{"addresses name compose services", checkAddresses},
	{"subscriber keys", checkSubscriberKeys},
	{"database roles", checkDatabaseRoles},
}

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	for _, cc := range composeChecks {
		t.Run(cc.name, func(t *testing.T) {
			for _, p := range cc.check(t, c) {
				t.Error(p)
			}
		})
	}
}

// sortedNames returns the keys of a map in order, for stable messages.
func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// heraldPrefixes are the environment namespaces owned by Herald's binaries.
var heraldPrefixes = []string{"HERALD_", "TEMPORAL_", "SUBSCRIBER_"}

// checkHeraldEnvironment: every Herald service runs one of Herald's binaries,
// sets only HERALD_/TEMPORAL_/SUBSCRIBER_ variables that binary reads, and
// values the binary accepts.
func checkHeraldEnvironment(t *testing.T, c *composeFile) []string {
	reads := programEnv(t)
	var problems []string
	for _, name := range sortedNames(c.Services) {
		s := c.Services[name]
		if !s.isHerald() {
			continue
		}
		progs := s.programs()
		if len(progs) == 0 {
			problems = append(problems, fmt.Sprintf("%s uses %s but runs none of workers, starter, subscriber "+
				"(entrypoint %q, command %q)", name, heraldImage, s.Entrypoint, s.Command))
			continue
		}
		for _, v := range sortedNames(s.Environment) {
			if !slices.ContainsFunc(heraldPrefixes, func(p string) bool { return strings.HasPrefix(v, p) }) {
				continue
			}
			if !slices.ContainsFunc(progs, func(p string) bool { return slices.Contains(reads[p], v) }) {
				problems = append(problems, fmt.Sprintf("%s sets %s, which %s does not read",
					name, v, strings.Join(progs, " or ")))
			}
		}
		getenv := func(v string) string { return s.Environment[v] }
		if slices.Contains(progs, "workers") {
			if _, err := config.LoadWorker(getenv); err != nil {
				problems = append(problems, fmt.Sprintf("%s: the worker refuses its settings: %v", name, err))
			}
		}
		if slices.Contains(progs, "starter") {
			if _, err := config.LoadCommon(getenv); err != nil {
				problems = append(problems, fmt.Sprintf("%s: starter refuses its settings: %v", name, err))
			}
		}
	}
	return problems
}

// checkWorker: the worker has its required settings, serves HTTP on the
// network (the subscriber fetches its JWKS, healthchecks probe it), reads its
// signing key from a named volume another service generates the key into,
// and can be scaled (no container name, no published port).
func checkWorker(_ *testing.T, c *composeFile) []string {
	w, ok := c.Services[workerService]
	if !ok {
		return []string{"no " + workerService + " service"}
	}
	var problems []string
	for _, v := range []string{"HERALD_DATABASE_URL", "HERALD_SIGNING_KEY"} {
		if w.Environment[v] == "" {
			problems = append(problems, fmt.Sprintf("%s does not set %s, which the worker requires", workerService, v))
		}
	}
	if w.ContainerName != "" {
		problems = append(problems, fmt.Sprintf("%s sets container_name %q: replicas would collide", workerService, w.ContainerName))
	}
	if len(w.Ports) > 0 {
		problems = append(problems, fmt.Sprintf("%s publishes %v: replicas would collide on the host port", workerService, w.Ports))
	}
	// Both listeners serve the compose network: the health checks, metrics
	// and JWKS, and the publishing API for apps beside Herald.
	for _, v := range []string{"HERALD_HTTP_ADDR", "HERALD_API_ADDR"} {
		host, port, err := net.SplitHostPort(w.Environment[v])
		if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
			problems = append(problems, fmt.Sprintf("%s: %s %q must listen on all interfaces (0.0.0.0:PORT)",
				workerService, v, w.Environment[v]))
			continue
		}
		if !w.exposes(port) {
			problems = append(problems, fmt.Sprintf("%s: %s listens on port %s, which expose does not list",
				workerService, v, port))
		}
	}
	if key := w.Environment["HERALD_SIGNING_KEY"]; key != "" {
		problems = append(problems, checkKeyVolume(c, w, key)...)
	}
	return problems
}

// checkKeyVolume: the worker's signing key lies in a named volume mounted
// read-only, and some other service mounts that volume writable and
// generates a key with starter.
func checkKeyVolume(c *composeFile, w service, keyPath string) []string {
	var vol mount
	for _, m := range w.Volumes {
		if keyPath == m.Target || strings.HasPrefix(keyPath, strings.TrimSuffix(m.Target, "/")+"/") {
			vol = m
		}
	}
	switch {
	case vol.Target == "":
		return []string{fmt.Sprintf("%s: HERALD_SIGNING_KEY %s is not in a mounted volume", workerService, keyPath)}
	case !vol.isNamedVolume():
		return []string{fmt.Sprintf("%s: the signing key comes from %s; use a named volume that a set-up service generates the key into",
			workerService, vol.Source)}
	case !vol.ReadOnly:
		return []string{fmt.Sprintf("%s: mount the key volume %s read-only", workerService, vol.Source)}
	}
	if _, ok := c.Volumes[vol.Source]; !ok {
		return []string{fmt.Sprintf("volume %s is not declared under volumes", vol.Source)}
	}
	for _, name := range sortedNames(c.Services) {
		s := c.Services[name]
		if name == workerService || !slices.Contains(s.programs(), "starter") ||
			!strings.Contains(strings.Join(s.Command, " "), "keys generate") {
			continue
		}
		for _, m := range s.Volumes {
			if m.Source == vol.Source && !m.ReadOnly {
				return nil
			}
		}
	}
	return []string{fmt.Sprintf("no service generates a key into volume %s (starter keys generate with the volume mounted writable)", vol.Source)}
}

// checkPorts: every published port is bound to a loopback address.
func checkPorts(_ *testing.T, c *composeFile) []string {
	var problems []string
	for _, name := range sortedNames(c.Services) {
		for _, p := range c.Services[name].Ports {
			addr, err := netip.ParseAddr(p.HostIP)
			if err != nil || !addr.IsLoopback() {
				problems = append(problems, fmt.Sprintf("%s publishes %s on every interface; bind it to 127.0.0.1", name, p.Spec))
			}
		}
	}
	return problems
}

// subnets returns the subnets of the networks a service joins.
func subnets(c *composeFile, s service) ([]netip.Prefix, []string) {
	var out []netip.Prefix
	var problems []string
	for _, netName := range s.networks() {
		n, ok := c.Networks[netName]
		if !ok || len(n.IPAM.Config) == 0 {
			problems = append(problems, fmt.Sprintf("network %s has no ipam subnet: Docker would pick one, "+
				"so no allow-list can name it", netName))
			continue
		}
		for _, cfg := range n.IPAM.Config {
			p, err := netip.ParsePrefix(cfg.Subnet)
			if err != nil {
				problems = append(problems, fmt.Sprintf("network %s: subnet %q: %v", netName, cfg.Subnet, err))
				continue
			}
			out = append(out, p.Masked())
		}
	}
	return out, problems
}

// checkAllowList: HERALD_ALLOW_NETWORKS is exactly the subnet of the compose
// network, wherever it is set; the worker must set it.
func checkAllowList(_ *testing.T, c *composeFile) []string {
	var problems []string
	for _, name := range sortedNames(c.Services) {
		s := c.Services[name]
		if !s.isHerald() {
			continue
		}
		value, set := s.Environment["HERALD_ALLOW_NETWORKS"]
		if !set {
			if slices.Contains(s.programs(), "workers") {
				problems = append(problems, fmt.Sprintf("%s does not set HERALD_ALLOW_NETWORKS: "+
					"deliveries to the subscriber container would be refused", name))
			}
			continue
		}
		want, netProblems := subnets(c, s)
		problems = append(problems, netProblems...)
		allow, err := netguard.ParseAllowList(value)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: HERALD_ALLOW_NETWORKS %q: %v", name, value, err))
			continue
		}
		if !samePrefixes(allow, want) {
			problems = append(problems, fmt.Sprintf("%s: HERALD_ALLOW_NETWORKS is %q but the compose network is %v",
				name, value, want))
		}
	}
	return problems
}

// samePrefixes reports whether two prefix lists hold the same networks.
func samePrefixes(a, b []netip.Prefix) bool {
	key := func(ps []netip.Prefix) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.Masked().String()
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(key(a), key(b))
}

// dependsConditions are the conditions Compose knows.
var dependsConditions = []string{"service_started", "service_healthy", "service_completed_successfully"}

// checkDependsOn: dependencies name services, use known conditions that can
// be met (a healthcheck to wait for, a one-shot service to complete), do not
// pull a profile-only tool into the default stack, and form no cycle.
func checkDependsOn(_ *testing.T, c *composeFile) []string {
	var problems []string
	for _, name := range sortedNames(c.Services) {
		s := c.Services[name]
		for _, dep := range sortedNames(s.DependsOn) {
			cond := s.DependsOn[dep]
			target, ok := c.Services[dep]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s depends on %s, which is not a service", name, dep))
				continue
			}
			if !slices.Contains(dependsConditions, cond) {
				problems = append(problems, fmt.Sprintf("%s depends on %s with unknown condition %q", name, dep, cond))
			}
			if cond == "service_healthy" && (target.Healthcheck == nil || target.Healthcheck.Disable ||
				len(target.Healthcheck.Test) == 0 || target.Healthcheck.Test[0] == "NONE") {
				problems = append(problems, fmt.Sprintf("%s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep))
			}
			if cond == "service_completed_successfully" && (target.Restart == "always" || target.Restart == "unless-stopped") {
				problems = append(problems, fmt.Sprintf("%s waits for %s to complete, but %s restarts (%s) and never completes",
					name, dep, dep, target.Restart))
			}
			if len(target.Profiles) > 0 && !slices.ContainsFunc(s.Profiles, func(p string) bool { return slices.Contains(target.Profiles, p) }) {
				problems = append(problems, fmt.Sprintf("%s depends on %s, which only runs with profiles %v", name, dep, target.Profiles))
			}
		}
	}
	if cycle := dependencyCycle(c); cycle != nil {
		problems = append(problems, "depends_on cycle: "+strings.Join(cycle, " -> "))
	}
	return problems
}

// dependencyCycle returns a depends_on cycle, or nil.
func dependencyCycle(c *composeFile) []string {
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(name string) []string
	visit = func(name string) []string {
		switch state[name] {
		case active:
			i := slices.Index(path, name)
			return append(slices.Clone(path[i:]), name)
		case done:
			return nil
		}
		state[name] = active
		path = append(path, name)
		for _, dep := range sortedNames(c.Services[name].DependsOn) {
			if _, ok := c.Services[dep]; !ok {
				continue
			}
			if cycle := visit(dep); cycle != nil {
				return cycle
			}
		}
		path = path[:len(path)-1]
		state[name] = done
		return nil
	}
	for _, name := range sortedNames(c.Services) {
		if cycle := visit(name); cycle != nil {
			return cycle
		}
	}
	return nil
}

// checkSearchAttributes: the set-up service registers exactly Herald's search
// attributes, with their types, in the namespace the worker uses.
func checkSearchAttributes(_ *testing.T, c *composeFile) []string {
	setup, ok := c.Services[setupService]
	if !ok {
		return []string{"no " + setupService + " service"}
	}
	var problems []string
	got := map[string]string{}
	for _, pair := range strings.Fields(setup.Environment["SEARCH_ATTRIBUTES"]) {
		name, typ, ok := strings.Cut(pair, "=")
		if !ok || name == "" || typ == "" {
			problems = append(problems, fmt.Sprintf("%s: SEARCH_ATTRIBUTES entry %q is not NAME=Type", setupService, pair))
			continue
		}
		if _, dup := got[name]; dup {
			problems = append(problems, fmt.Sprintf("%s: search attribute %s listed twice", setupService, name))
		}
		got[name] = typ
	}
	want := heraldSearchAttributes()
	for _, name := range sortedNames(want) {
		switch typ, ok := got[name]; {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s does not register %s (%s)", setupService, name, want[name]))
		case typ != want[name]:
			problems = append(problems, fmt.Sprintf("%s registers %s as %s; the workflow uses %s", setupService, name, typ, want[name]))
		}
	}
	for _, name := range sortedNames(got) {
		if _, ok := want[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s registers %s, which the workflow does not use", setupService, name))
		}
	}
	if w, ok := c.Services[workerService]; ok {
		ns := func(s service) string {
			if v := s.Environment["TEMPORAL_NAMESPACE"]; v != "" {
				return v
			}
			return config.DefaultTemporalNamespace
		}
		if ns(setup) != ns(w) {
			problems = append(problems, fmt.Sprintf("%s registers the search attributes in namespace %q but %s uses %q",
				setupService, ns(setup), workerService, ns(w)))
		}
	}
	return problems
}

// checkAddresses: the hosts Herald's services are pointed at (Temporal,
// PostgreSQL, the worker's JWKS and readiness URLs) are compose services, and
// the worker URLs use the port the worker serves on.
func checkAddresses(_ *testing.T, c *composeFile) []string {
	var problems []string
	wantHost := func(service, variable, host string) {
		if _, ok := c.Services[host]; !ok {
			problems = append(problems, fmt.Sprintf("%s: %s names host %q, which is not a compose service", service, variable, host))
		}
	}
	for _, name := range sortedNames(c.Services) {
		s := c.Services[name]
		if !s.isHerald() {
			continue
		}
		if v := s.Environment["TEMPORAL_ADDRESS"]; v != "" {
			host, _, err := net.SplitHostPort(v)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: TEMPORAL_ADDRESS %q: %v", name, v, err))
			} else {
				wantHost(name, "TEMPORAL_ADDRESS", host)
			}
		}
		if v := s.Environment["HERALD_DATABASE_URL"]; v != "" {
			u, err := url.Parse(v)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: HERALD_DATABASE_URL: %v", name, err))
			} else {
				wantHost(name, "HERALD_DATABASE_URL", u.Hostname())
			}
		}
		// URLs of a worker's HTTP endpoints: the JWKS and the readiness probe.
		for _, variable := range []string{"SUBSCRIBER_JWKS", "HERALD_WORKER_URL"} {
			v := s.Environment[variable]
			if v == "" {
				continue
			}
			u, err := url.Parse(v)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %s: %v", name, variable, err))
				continue
			}
			wantHost(name, variable, u.Hostname())
			if target, ok := c.Services[u.Hostname()]; ok {
				_, port, _ := net.SplitHostPort(target.Environment["HERALD_HTTP_ADDR"])
				if u.Port() != port {
					problems = append(problems, fmt.Sprintf("%s: %s uses port %s but %s serves on %q",
						name, variable, u.Port(), u.Hostname(), target.Environment["HERALD_HTTP_ADDR"]))
				}
			}
		}
	}
	return problems
}

// checkSubscriberKeys: the example subscriber trusts keys it gets safely:
// pinned from a read-only named volume that holds no private key (not the
// worker's key volume), or fetched from an https JWKS URL. Plain http over
// the compose network would let any container answer with its own keys.
func checkSubscriberKeys(_ *testing.T, c *composeFile) []string {
	const name = "herald-subscriber"
	s, ok := c.Services[name]
	if !ok {
		return []string{"no " + name + " service"}
	}
	var problems []string
	if v := s.Environment["SUBSCRIBER_JWKS"]; v != "" {
		if u, err := url.Parse(v); err != nil || u.Scheme != "https" {
			problems = append(problems, fmt.Sprintf("%s: SUBSCRIBER_JWKS %q is not https; pin the keys with SUBSCRIBER_KEYS instead", name, v))
		}
	}
	keys := s.Environment["SUBSCRIBER_KEYS"]
	if keys == "" {
		return problems
	}
	privateVolumes := map[string]bool{}
	for _, m := range c.Services[workerService].Volumes {
		if strings.HasPrefix(c.Services[workerService].Environment["HERALD_SIGNING_KEY"], m.Target) {
			privateVolumes[m.Source] = true
		}
	}
	var vol mount
	for _, m := range s.Volumes {
		if strings.HasPrefix(keys, strings.TrimSuffix(m.Target, "/")+"/") {
			vol = m
		}
	}
	switch {
	case vol.Target == "":
		problems = append(problems, fmt.Sprintf("%s: SUBSCRIBER_KEYS %s is not in a mounted volume", name, keys))
	case !vol.isNamedVolume() || !vol.ReadOnly:
		problems = append(problems, fmt.Sprintf("%s: mount the public keys volume %s read-only", name, vol.Source))
	case privateVolumes[vol.Source]:
		problems = append(problems, fmt.Sprintf("%s mounts %s, the worker's private signing keys", name, vol.Source))
	}
	return problems
}

// checkDatabaseRoles: Herald's processes connect as a runtime role that is
// not the owner role the migrations run as; a starter migrate service
// migrates as the owner and grants that runtime role; the PostgreSQL
// initialisation script creates both roles.
func checkDatabaseRoles(t *testing.T, c *composeFile) []string {
	userOf := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			return ""
		}
		return u.User.Username()
	}
	var problems []string
	runtime := userOf(c.Services[workerService].Environment["HERALD_DATABASE_URL"])
	owners := map[string]bool{}
	migrates := false
	for _, name := range sortedNames(c.Services) {
		s := c.Services[name]
		if o := userOf(s.Environment["HERALD_OWNER_DATABASE_URL"]); o != "" {
			owners[o] = true
			if strings.Contains(strings.Join(s.Command, " "), "starter migrate") && s.Environment["HERALD_RUNTIME_ROLE"] == runtime {
				migrates = true
			}
		}
	}
	for _, name := range sortedNames(c.Services) {
		s := c.Services[name]
		if u := userOf(s.Environment["HERALD_DATABASE_URL"]); s.isHerald() && owners[u] {
			problems = append(problems, fmt.Sprintf("%s connects as %s, the owner role: Herald's processes must run as the runtime role", name, u))
		}
	}
	if runtime == "" {
		problems = append(problems, workerService+": HERALD_DATABASE_URL names no user")
	}
	if !migrates {
		problems = append(problems, fmt.Sprintf("no service runs starter migrate with HERALD_OWNER_DATABASE_URL and HERALD_RUNTIME_ROLE=%s", runtime))
	}
	initSQL, err := os.ReadFile(filepath.Join("postgres", "init.sql"))
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range append(sortedNames(owners), runtime) {
		if !strings.Contains(string(initSQL), "CREATE ROLE "+role+" LOGIN") {
			problems = append(problems, fmt.Sprintf("deploy/postgres/init.sql does not create role %s", role))
		}
	}
	return problems
}
