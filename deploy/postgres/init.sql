-- First start of the compose PostgreSQL (an empty data volume): one role and
-- database for Herald, one role owning Temporal's two databases. The image runs
-- this once, as the superuser; later starts skip it. The passwords are for a
-- stack on one machine whose PostgreSQL port is not published: change them (and
-- the URLs in docker-compose.yml) before reusing this anywhere else.
CREATE ROLE herald LOGIN PASSWORD 'herald';
CREATE DATABASE herald OWNER herald;

CREATE ROLE temporal LOGIN PASSWORD 'temporal';
CREATE DATABASE temporal OWNER temporal;
CREATE DATABASE temporal_visibility OWNER temporal;
