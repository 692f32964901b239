#!/bin/sh
# Creates or upgrades Temporal's schema in its two PostgreSQL databases (the
# docker-compose service temporal-schema, run with the temporalio/admin-tools
# image before the server starts). setup-schema only adds the version tables
# when missing and update-schema only applies versions newer than the
# database's, so running this on every start is safe; after a server upgrade
# it brings the schema up to the new image's version.
#
# Environment (read by temporal-sql-tool itself):
#   SQL_PLUGIN, SQL_HOST, SQL_PORT, SQL_USER, SQL_PASSWORD
# and, for this script:
#   TEMPORAL_DATABASE             default: temporal
#   TEMPORAL_VISIBILITY_DATABASE  default: temporal_visibility
#   TEMPORAL_SCHEMA_DIR           default: /etc/temporal/schema/postgresql/v12 (in the image)
set -eu

: "${SQL_HOST:?SQL_HOST must name the PostgreSQL host}"
: "${SQL_USER:?SQL_USER must name the role owning the Temporal databases}"
main=${TEMPORAL_DATABASE:-temporal}
visibility=${TEMPORAL_VISIBILITY_DATABASE:-temporal_visibility}
schema=${TEMPORAL_SCHEMA_DIR:-/etc/temporal/schema/postgresql/v12}

# migrate DATABASE SCHEMA_SUBDIR
migrate() {
  echo "temporal-schema: $1 ($2)"
  temporal-sql-tool --db "$1" setup-schema -v 0.0
  temporal-sql-tool --db "$1" update-schema -d "$schema/$2/versioned"
}

migrate "$main" temporal
migrate "$visibility" visibility
echo "temporal-schema: done"
