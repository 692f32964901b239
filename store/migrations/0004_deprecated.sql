-- A declared version may be deprecated (manifest "deprecated": true): publishing it
-- still works and says so, and the catalog lists the subscribers still on it.
ALTER TABLE declarations ADD COLUMN deprecated boolean NOT NULL DEFAULT false;
