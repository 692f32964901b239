// Package deploy holds the container deployment's support files and, in its
// tests, the checks that keep docker-compose.yml and the Dockerfile honest
// without a Docker engine: the compose file parses; every Herald service sets
// only environment variables its program reads, with values the program
// accepts; published ports are bound to loopback; the worker's allow-list is
// the compose network's subnet; depends_on names real services with sensible
// conditions; the search attributes registered by temporal-setup are exactly
// the ones the Delivery workflow uses; the compose manifests mirror the
// examples; the Dockerfile builds with the Makefile's command and runs as a
// non-root user.
//
// Layout:
//
//	postgres/init.sql          roles and databases, on the first PostgreSQL start
//	temporal/schema.sh         Temporal's schema (temporal-schema service)
//	temporal/setup.sh          namespace and search attributes (temporal-setup service)
//	temporal/dynamicconfig.yaml the compose Temporal server's dynamic config
//	manifests/                 the example manifests with compose host names
//
// There is no Go code to import here.
package deploy
