-- First start of the compose PostgreSQL (an empty data volume): Herald's two
-- roles and its database, one role owning Temporal's two databases. The image
-- runs this once, as the superuser; later starts skip it. The passwords are for
-- a stack on one machine whose PostgreSQL port is not published: change them
-- (and the URLs in docker-compose.yml) before reusing this anywhere else.
--
-- herald owns the database and Herald's tables and runs the migrations
-- (herald-init); herald_app is the runtime role of the workers and the starter
-- CLI, granted its privileges by `starter migrate` (HERALD_RUNTIME_ROLE): it
-- owns nothing and may only INSERT and SELECT on the audit trail.
CREATE ROLE herald LOGIN PASSWORD 'herald';
CREATE ROLE herald_app LOGIN PASSWORD 'herald_app';
CREATE DATABASE herald OWNER herald;

CREATE ROLE temporal LOGIN PASSWORD 'temporal';
CREATE DATABASE temporal OWNER temporal;
CREATE DATABASE temporal_visibility OWNER temporal;
