package deploy_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestComposeChecksCatchBrokenFiles breaks the real compose file in one place
// at a time and expects the responsible check to report it.
func TestComposeChecksCatchBrokenFiles(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, doc map[string]any)
		check  check
		want   string
	}{
		{
			name:   "worker sets a variable it does not read",
			mutate: func(t *testing.T, doc map[string]any) { envDoc(t, doc, workerService)["HERALD_RETRY_SCHEDUL"] = "1s" },
			check:  checkHeraldEnvironment,
			want:   "HERALD_RETRY_SCHEDUL, which workers does not read",
		},
		{
			name: "starter told the signing key",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, "herald-starter")["HERALD_SIGNING_KEY"] = "/keys"
			},
			check: checkHeraldEnvironment,
			want:  "HERALD_SIGNING_KEY, which starter does not read",
		},
		{
			name: "subscriber given a Herald setting",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, "herald-subscriber")["HERALD_LOG_LEVEL"] = "debug"
			},
			check: checkHeraldEnvironment,
			want:  "HERALD_LOG_LEVEL, which subscriber does not read",
		},
		{
			name: "worker given a value it refuses",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, workerService)["HERALD_RETRY_SCHEDULE"] = "1s,soon"
			},
			check: checkHeraldEnvironment,
			want:  "HERALD_RETRY_SCHEDULE",
		},
		{
			name: "Herald image running something else",
			mutate: func(t *testing.T, doc map[string]any) {
				serviceDoc(t, doc, workerService)["entrypoint"] = []any{"sleep", "infinity"}
			},
			check: checkHeraldEnvironment,
			want:  "runs none of",
		},
		{
			name:   "worker without a signing key",
			mutate: func(t *testing.T, doc map[string]any) { delete(envDoc(t, doc, workerService), "HERALD_SIGNING_KEY") },
			check:  checkWorker,
			want:   "HERALD_SIGNING_KEY",
		},
		{
			name:   "worker without a database",
			mutate: func(t *testing.T, doc map[string]any) { envDoc(t, doc, workerService)["HERALD_DATABASE_URL"] = "" },
			check:  checkWorker,
			want:   "HERALD_DATABASE_URL",
		},
		{
			name:   "worker with a fixed container name",
			mutate: func(t *testing.T, doc map[string]any) { serviceDoc(t, doc, workerService)["container_name"] = "worker" },
			check:  checkWorker,
			want:   "container_name",
		},
		{
			name: "worker with a published port",
			mutate: func(t *testing.T, doc map[string]any) {
				serviceDoc(t, doc, workerService)["ports"] = []any{"127.0.0.1:8088:8088"}
			},
			check: checkWorker,
			want:  "publishes",
		},
		{
			name: "worker listening on loopback only",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, workerService)["HERALD_HTTP_ADDR"] = "127.0.0.1:8088"
			},
			check: checkWorker,
			want:  "HERALD_HTTP_ADDR",
		},
		{
			name: "signing key baked into a host path",
			mutate: func(t *testing.T, doc map[string]any) {
				serviceDoc(t, doc, workerService)["volumes"] = []any{"./keys:/keys:ro"}
			},
			check: checkWorker,
			want:  "named volume",
		},
		{
			name: "UI published on every interface",
			mutate: func(t *testing.T, doc map[string]any) {
				serviceDoc(t, doc, "temporal-ui")["ports"] = []any{"8080:8080"}
			},
			check: checkPorts,
			want:  "temporal-ui publishes 8080:8080",
		},
		{
			name: "long port syntax on every interface",
			mutate: func(t *testing.T, doc map[string]any) {
				serviceDoc(t, doc, "temporal")["ports"] = []any{map[string]any{"target": 7233, "published": "7233", "host_ip": "0.0.0.0"}}
			},
			check: checkPorts,
			want:  "temporal publishes",
		},
		{
			name: "allow-list wider than the compose network",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, workerService)["HERALD_ALLOW_NETWORKS"] = "172.28.0.0/16,10.0.0.0/8"
			},
			check: checkAllowList,
			want:  "HERALD_ALLOW_NETWORKS",
		},
		{
			name: "network subnet changed alone",
			mutate: func(t *testing.T, doc map[string]any) {
				ipam := mapAt(t, doc, "networks", "default", "ipam")
				ipam["config"] = []any{map[string]any{"subnet": "172.29.0.0/16"}}
			},
			check: checkAllowList,
			want:  "172.29.0.0/16",
		},
		{
			name: "worker without an allow-list",
			mutate: func(t *testing.T, doc map[string]any) {
				delete(envDoc(t, doc, workerService), "HERALD_ALLOW_NETWORKS")
			},
			check: checkAllowList,
			want:  "does not set HERALD_ALLOW_NETWORKS",
		},
		{
			name: "dependency on a missing service",
			mutate: func(t *testing.T, doc map[string]any) {
				deps := mapAt(t, serviceDoc(t, doc, workerService), "depends_on")
				deps["temporal-admin"] = map[string]any{"condition": "service_started"}
			},
			check: checkDependsOn,
			want:  "temporal-admin, which is not a service",
		},
		{
			name: "waiting for health that is never reported",
			mutate: func(t *testing.T, doc map[string]any) {
				deps := mapAt(t, serviceDoc(t, doc, workerService), "depends_on")
				deps["herald-keys"] = map[string]any{"condition": "service_healthy"}
			},
			check: checkDependsOn,
			want:  "herald-keys has no healthcheck",
		},
		{
			name: "waiting for a long-running service to complete",
			mutate: func(t *testing.T, doc map[string]any) {
				deps := mapAt(t, serviceDoc(t, doc, workerService), "depends_on")
				deps["postgresql"] = map[string]any{"condition": "service_completed_successfully"}
			},
			check: checkDependsOn,
			want:  "postgresql restarts",
		},
		{
			name: "unknown condition",
			mutate: func(t *testing.T, doc map[string]any) {
				deps := mapAt(t, serviceDoc(t, doc, workerService), "depends_on")
				deps["postgresql"] = map[string]any{"condition": "service_ready"}
			},
			check: checkDependsOn,
			want:  "service_ready",
		},
		{
			name: "dependency cycle",
			mutate: func(t *testing.T, doc map[string]any) {
				serviceDoc(t, doc, "postgresql")["depends_on"] = []any{workerService}
			},
			check: checkDependsOn,
			want:  "cycle",
		},
		{
			name: "default service depending on a tool",
			mutate: func(t *testing.T, doc map[string]any) {
				deps := mapAt(t, serviceDoc(t, doc, workerService), "depends_on")
				deps["herald-starter"] = map[string]any{"condition": "service_started"}
			},
			check: checkDependsOn,
			want:  "profiles",
		},
		{
			name: "a search attribute missing",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, setupService)["SEARCH_ATTRIBUTES"] = "HeraldSubscription=Keyword HeraldApp=Keyword " +
					"HeraldEventType=Keyword HeraldStatus=Keyword"
			},
			check: checkSearchAttributes,
			want:  "HeraldQueued",
		},
		{
			name: "a search attribute of the wrong type",
			mutate: func(t *testing.T, doc map[string]any) {
				env := envDoc(t, doc, setupService)
				env["SEARCH_ATTRIBUTES"] = strings.Replace(fmt.Sprint(env["SEARCH_ATTRIBUTES"]), "HeraldQueued=Int", "HeraldQueued=Keyword", 1)
			},
			check: checkSearchAttributes,
			want:  "HeraldQueued",
		},
		{
			name: "an extra search attribute",
			mutate: func(t *testing.T, doc map[string]any) {
				env := envDoc(t, doc, setupService)
				env["SEARCH_ATTRIBUTES"] = fmt.Sprint(env["SEARCH_ATTRIBUTES"]) + " HeraldTenant=Keyword"
			},
			check: checkSearchAttributes,
			want:  "HeraldTenant",
		},
		{
			name:   "search attributes registered in another namespace",
			mutate: func(t *testing.T, doc map[string]any) { envDoc(t, doc, setupService)["TEMPORAL_NAMESPACE"] = "herald" },
			check:  checkSearchAttributes,
			want:   "namespace",
		},
		{
			name: "worker pointed at a host that is not a service",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, workerService)["TEMPORAL_ADDRESS"] = "temporal-frontend:7233"
			},
			check: checkAddresses,
			want:  "temporal-frontend",
		},
		{
			name: "starter probing a worker that does not exist",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, "herald-starter")["HERALD_WORKER_URL"] = "http://worker:8088"
			},
			check: checkAddresses,
			want:  `host "worker"`,
		},
		{
			name: "worker connecting as the owner role",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, workerService)["HERALD_DATABASE_URL"] = "postgres://herald:herald@postgresql:5432/herald"
			},
			check: checkDatabaseRoles,
			want:  "herald-worker connects as herald, the owner role",
		},
		{
			name: "migrations without granting the runtime role",
			mutate: func(t *testing.T, doc map[string]any) {
				delete(envDoc(t, doc, "herald-init"), "HERALD_RUNTIME_ROLE")
			},
			check: checkDatabaseRoles,
			want:  "no service runs starter migrate",
		},
		{
			name: "subscriber fetching keys over plain http",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, "herald-subscriber")["SUBSCRIBER_JWKS"] = "http://herald-worker:8088/.well-known/jwks.json"
			},
			check: checkSubscriberKeys,
			want:  "is not https",
		},
		{
			name: "subscriber pinning keys from the worker's private key volume",
			mutate: func(t *testing.T, doc map[string]any) {
				svc := doc["services"].(map[string]any)["herald-subscriber"].(map[string]any)
				svc["volumes"] = []any{"herald-keys:/public-keys:ro"}
			},
			check: checkSubscriberKeys,
			want:  "private signing keys",
		},
		{
			name: "subscriber fetching keys from a port the worker does not serve",
			mutate: func(t *testing.T, doc map[string]any) {
				envDoc(t, doc, "herald-subscriber")["SUBSCRIBER_JWKS"] = "http://herald-worker:9090/.well-known/jwks.json"
			},
			check: checkAddresses,
			want:  "9090",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mutatedCompose(t, func(doc map[string]any) { tt.mutate(t, doc) })
			problems := tt.check(t, c)
			for _, p := range problems {
				if strings.Contains(p, tt.want) {
					return
				}
			}
			t.Errorf("want a problem mentioning %q, got %q", tt.want, problems)
		})
	}
}
